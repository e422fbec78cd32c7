# Every target works on a fresh machine with Python 3.11+: `setup` builds the venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint run bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest

run: setup
	$(BIN)/ringflow dev --demo examples/scripts/appointment_reminder_reschedule.yaml --demo-kill-at 3

bench: setup
	@for b in bench/[!_]*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .ringflow .pytest_cache
