# The README's two commands: `make run` (main job) and `make test` (the tests).
# Both create .venv with the pinned stack first if it is missing or stale.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hfexport-installed
PINS   := $(wildcard hfexport/pins/*.txt)
TORCH_PIN := $(shell grep -E '^torch==' hfexport/pins/core.txt)

.PHONY: run test test-all conformance env clean-venv

$(STAMP): pyproject.toml $(PINS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, from its pin (the CPU wheel on disk), so no other package can pull another torch.
	$(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet -e ".[all,test]" "$(TORCH_PIN)"
	$(BIN)/python -c "import torch, sys; v = torch.__version__.split('+')[0]; want = '$(TORCH_PIN)'.split('==')[1]; sys.exit(0 if v == want else f'torch {v} installed, pinned {want}')"
	touch $(STAMP)

env: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m conformance.matrix

test: $(STAMP)
	$(BIN)/python -m pytest -n 2

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "" tests

conformance: $(STAMP)
	$(BIN)/python -m pytest -n 2 conformance --hfexport-report out/conformance.json

clean-venv:
	rm -rf $(VENV)
