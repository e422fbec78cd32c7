# Every target works on a fresh machine with Python 3.11+: `setup` builds the venv from the
# hashed lock (requirements/dev.txt: exact versions, every file's hash checked), then installs
# Ringflow itself on top without touching those pins.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements/dev.txt
COMPILE = $(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --quiet --excludes requirements/excludes.txt

.PHONY: setup test lint run bench bench-load bench-campaign histories clean lock

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-deps --require-hashes -r requirements/dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# After changing dependencies in pyproject.toml: re-resolve the locks (the worker and agent
# images' locks are constrained to the dev lock's versions, so all three agree).
lock: setup
	$(COMPILE) --extra dev -o requirements/dev.txt
	$(COMPILE) --extra worker -c requirements/dev.txt -o requirements/worker.txt
	$(COMPILE) --extra agent -c requirements/dev.txt -o requirements/agent.txt

# mypy by package: a plain directory run finds each module twice under different names.
MYPY_PACKAGES := -p ringflow

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(MYPY_PACKAGES)

test: lint
	$(BIN)/pytest

run: setup
	$(BIN)/ringflow dev --demo examples/scripts/appointment_reminder_reschedule.yaml --demo-kill-at 3

bench: setup
	@for b in bench/[!_]*.py; do RINGFLOW_BENCH_SHORT=1 $(BIN)/python $$b || exit 1; done

bench-load: setup  # the full capacity ramp of bench/load.py (many minutes)
	$(BIN)/python bench/load.py

bench-campaign: setup  # bench/campaign.py at full size: 10,000 contacts at 4 cps (80+ minutes)
	$(BIN)/python bench/campaign.py

# A release's baseline (docs/versioning.md): re-record every saved history the replay tests
# read (tests/histories/: the calls, then the campaign) on today's workflow code, then the
# release record tests/workflow_release.json (version, code fingerprint, patch registry).
# Run it only once no call or campaign started on the previous release can still be running.
histories: setup
	rm -f tests/histories/*.json
	$(BIN)/python tests/support/make_histories.py --force
	$(BIN)/python tests/support/make_campaign_history.py
	$(BIN)/python tests/support/workflow_fingerprint.py --record

clean:
	rm -rf $(VENV) .ringflow .pytest_cache
