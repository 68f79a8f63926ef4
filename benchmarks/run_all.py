"""Run every benchmark script (benchmarks/bench_*.py) in its own process, in name order.

Each script prints its own table of figures and ratios against the baseline
measured in the same run; this runner only sequences them and reports failures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failures = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"\n=== {script.stem} ===", flush=True)
        command = [sys.executable, "-m", f"benchmarks.{script.stem}"]
        if subprocess.run(command, cwd=here.parent, check=False).returncode != 0:
            failures.append(script.name)
    if failures:
        print(f"\nfailed: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
