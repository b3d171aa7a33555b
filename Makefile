# The two commands of README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 6006

.PHONY: venv test lint demo bench clean

# The demo needs the package alone; the tests add their extras (jax, torch, playwright, XProf).
$(VENV)/.installed-demo: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-demo
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .

test: venv lint
	$(PY) -m pytest -q -rs -n auto tests

# TensorBoard on the bundled real profiles (a JAX XSpace run, a PyTorch
# trace-handler run, a plain Chrome JSON run): open the Trace Reduce tab.
demo: $(VENV)/.installed-demo
	@echo "Open http://127.0.0.1:$(PORT)/#tb_reduce (Ctrl+C to stop)"
	$(VENV)/bin/tensorboard --logdir demo_logdir --host 127.0.0.1 --port $(PORT) --load_fast=false

bench: venv
	$(PY) bench/bench_reduce.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
