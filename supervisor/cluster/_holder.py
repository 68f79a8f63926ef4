"""Which process holds a node id's lease: a token naming it, and whether it is gone.

A node records ``this_process()`` with its registration (``nodes.holder``). A
process restarted under the same node id finds the old lease still live (its
heartbeat is younger than the TTL) and would wait out that TTL. It need not when
it can prove the holder is gone (``gone``): the token names the same machine
boot and the same PID namespace as its own, and that PID is not running, or
runs another process (its start time differs). A zombie still counts as running: a
thread group whose first thread ended shows as one while its other threads run.
Anything else (another machine, another container's namespace, a
platform without ``/proc``, a token it cannot read) proves nothing, and the TTL
is waited out as before: a live holder elsewhere must never lose its id early.

Token: ``linux:<boot id>:<pid namespace dev>-<inode>:<pid>:<start time in ticks>``,
then ``#`` and a random nonce of the registration (``new_holder``): a registration
retried after its connection broke recognises the row its first try wrote as its own.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["gone", "new_holder", "this_process"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_PID_NAMESPACE = "/proc/self/ns/pid"


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        found = os.stat(_PID_NAMESPACE)
    except OSError:
        return None
    return f"{found.st_dev}-{found.st_ino}"


def _start_time(pid: int) -> str | None:
    """The start time (clock ticks after boot) of process ``pid``, from field 22 of
    ``/proc/<pid>/stat``, or ``None`` when there is no such process. The command name
    (field 2) may hold spaces and parentheses, so the fields are read after its last
    ``)``.

    Raises:
        OSError: ``/proc`` could not be read for another reason than a missing process.
        ValueError, IndexError: the file is not as expected.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()[19]


def this_process() -> str | None:
    """This process's token, or ``None`` where it cannot be made (not Linux, no ``/proc``).
    Made anew on every call, never cached: a forked child is another process."""
    boot, namespace = _boot_id(), _pid_namespace()
    if boot is None or namespace is None:
        return None
    try:
        started = _start_time(os.getpid())
    except (OSError, ValueError, IndexError):
        return None
    if started is None:
        return None
    return f"linux:{boot}:{namespace}:{os.getpid()}:{started}"


def new_holder() -> str:
    """The token of one registration by this process (``this_process``, or ``unknown``
    where there is none, then ``#`` and a fresh nonce)."""
    return f"{this_process() or 'unknown'}#{secrets.token_hex(8)}"


def gone(token: str | None) -> bool:
    """Whether the process ``token`` (a ``new_holder``) names has certainly ended (see the
    module docstring); False whenever that cannot be known from here."""
    mine = this_process()
    if token is None or mine is None:
        return False
    process = token.partition("#")[0]
    if process == mine:
        return False  # this very process: alive
    parts = process.split(":")
    here = mine.split(":")
    if len(parts) != 5 or parts[:3] != here[:3] or not parts[3].isdigit():
        return False  # another machine, boot or PID namespace, or not a token of ours
    try:
        started = _start_time(int(parts[3]))
    except (OSError, ValueError, IndexError):
        return False
    return started is None or started != parts[4]  # ended, or its PID reused since
