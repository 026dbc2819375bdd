# The README's two commands: `make run` (main job) and `make test` (the tests).
# Both create .venv with the pinned stack first if it is missing or stale.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hfexport-installed
PINS   := $(wildcard hfexport/pins/*.txt) hfexport/pins/window.toml
CONSTRAINTS := hfexport/pins/constraints.txt
TORCH_PIN := $(shell grep -E '^torch==' $(CONSTRAINTS))
# pip at error level: a machine's pip configuration may name package indexes that do not exist there, and
# pip warns about each one on every install; a failed install still prints its error and stops make.
PIP_QUIET := --quiet --quiet

.PHONY: run run-all matrix coverage coverage-peer lint test test-all conformance-peer env clean-venv compat compat-page requirements

$(STAMP): pyproject.toml $(PINS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, from its pin (the CPU wheel on disk), so no other package can pull another torch; then
	# hfexport with every extra, its window's ranges held to the pinned stack by the constraints.
	$(BIN)/python -m pip install $(PIP_QUIET) "$(TORCH_PIN)"
	$(BIN)/python -m pip install $(PIP_QUIET) -c $(CONSTRAINTS) -e ".[all,test,dev]"
	$(BIN)/python -c "import torch, sys; v = torch.__version__.split('+')[0]; want = '$(TORCH_PIN)'.split('==')[1]; sys.exit(0 if v == want else f'torch {v} installed, pinned {want}')"
	touch $(STAMP)

env: $(STAMP)

# The main job: the conformance suite's default tier over the built-in zoo, every installed backend;
# pytest prints the per-model matrix and the counts per check and backend, the JSON report keeps them.
run: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup conformance -p no:cacheprovider --hfexport-report out/conformance.json

# Every case, slow ones included (ExecuTorch over the whole zoo: an hour or more on 2 cores).
run-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup conformance -m "" -p no:cacheprovider --hfexport-report out/conformance-all.json

# The quick export-only table (seconds and max error per model and backend).
matrix: $(STAMP)
	$(BIN)/python -m conformance.matrix

# How much of transformers exports and matches eager, per architecture and backend, for hfexport and the peer
# (transformers.exporters), side by side in docs/coverage.md. The sweep is a pytest collection (one test per
# architecture x backend x check, conformance/coverage/test_sweep.py) writing the plugin's JSON report; the peer, a
# pinned release, is read from its committed report in $(COVERAGE_SEED) (coverage-peer measures it again). No
# budget: a run takes its measured wall time (docs/coverage.md). Run again after an interruption: the artifact cache
# keeps every export that finished. The report reads every out/coverage/hfexport*.json, the newest row of a cell
# winning, so a rerun of the failures (COVERAGE_ARGS=--lf COVERAGE_REPORT=out/coverage/hfexport-lf.json) adds to it.
# COVERAGE_SCOPE=all measures every registered class; COVERAGE_ARGS adds pytest options (-k, --hfexport-shard=K/N,
# --hfexport-baseline=FILE); the run's exit status is make's, after the report is written.
COVERAGE_SCOPE ?= types
COVERAGE_SEED := docs/reports/coverage
COVERAGE_REPORT ?= out/coverage/hfexport.json
COVERAGE_ARGS ?=
COVERAGE_RUN = $(BIN)/python -m pytest -n 2 --dist loadgroup conformance/coverage --coverage-sweep $(COVERAGE_SCOPE) --hfexport-backend=dynamo,onnx -q
coverage: $(STAMP)
	$(COVERAGE_RUN) --hfexport-report $(COVERAGE_REPORT) $(COVERAGE_ARGS); status=$$?; \
	$(BIN)/python -m conformance.coverage --report --peer $(COVERAGE_SEED)/transformers.json && exit $$status

# The peer's sweep from scratch (about an hour on 2 cores), its report committed as the seed coverage reuses.
coverage-peer: $(STAMP)
	$(COVERAGE_RUN) --hfexport-impl=transformers --hfexport-report $(COVERAGE_SEED)/transformers.json $(COVERAGE_ARGS)

# Lint, format and types of the three packages (seconds), then the tests.
LINTED := hfexport hfexport_launcher.py pytest_hfexport conformance
lint: $(STAMP)
	$(BIN)/python -m ruff check --quiet $(LINTED)
	$(BIN)/python -m ruff format --check --quiet $(LINTED)
	$(BIN)/python -m mypy

test: lint
	$(BIN)/python -m pytest -n 2

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "" tests

# The suite against the peer implementation (transformers.exporters of the pinned transformers).
conformance-peer: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup conformance -p no:cacheprovider --hfexport-impl=transformers --hfexport-report out/conformance-transformers.json

# The default tier on every stack of the tested window (hfexport/pins/window.toml): one virtual environment per
# stack under .venvs/ (kept between runs), each run gated against the pinned stack's report; writes
# docs/compatibility.md. STACKS="transformers-5.25 torch-2.14" runs only those (the others keep their last result).
STACKS ?=
COMPAT_ARGS ?=
compat: $(STAMP)
	$(BIN)/python -m conformance.compat $(if $(STACKS),--stacks $(STACKS)) $(if $(COMPAT_ARGS),--pytest-args="$(COMPAT_ARGS)")

# docs/compatibility.md from the per-stack summaries a CI matrix's jobs wrote into out/compat/.
compat-page: $(STAMP)
	$(BIN)/python -m conformance.compat --merge $${HFEXPORT_COMPAT_OUT:-out/compat}/*.summary.json

# requires-*.txt (what pip installs) from the window.
requirements:
	$(BIN)/python -c "from hfexport import environment; environment.write_requirements()"

clean-venv:
	rm -rf $(VENV)
