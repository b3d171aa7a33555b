# The two commands of README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_TRACE := demo_logdir/pytorch_cnn/vm_12922.1795977935943642718.pt.trace.json.gz
DEMO_OUT := /tmp/tb-reduce-demo

.PHONY: venv test lint demo bench clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .

test: venv lint
	$(PY) -m pytest -q -rs -n auto tests

# Until the TensorBoard plugin lands (issue 4), the demo reduces the bundled real
# PyTorch profile at every level with the command line.
demo: venv
	mkdir -p $(DEMO_OUT)
	for level in 0 1 2 3 4 auto; do \
	  $(VENV)/bin/tb-reduce reduce $(DEMO_TRACE) -o $(DEMO_OUT)/level-$$level.json.gz --level $$level || exit 1; \
	done
	@echo "Reduced traces in $(DEMO_OUT): open them in https://ui.perfetto.dev or chrome://tracing"

bench: venv
	$(PY) bench/bench_reduce.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
