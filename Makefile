# Quick start: `make demo` and `make test` each set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint typecheck clean constraints

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the project metadata or the pinned versions change.
$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --config-settings editable_mode=compat \
		-c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Move the pins to the newest releases pyproject.toml allows (then run `make lint test`
# and commit constraints.txt if they pass).
constraints: | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade --config-settings editable_mode=compat -e '.[dev]'
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt
	touch $(STAMP)

DEMO ?= examples/crash_recovery.py

demo: $(STAMP)
	$(BIN)/python $(DEMO)

# Bytecode of the project's own modules first: where PYTHONDONTWRITEBYTECODE is set (as
# on this project's machines) every process the tests start (pytest, a CLI, a server, a
# worker's forkserver) compiled all of them again, about 1 s each.
test: $(STAMP)
	$(BIN)/python -m compileall -q actors supervisor gateway cli tests examples benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
