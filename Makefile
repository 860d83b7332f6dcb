# Two set-up commands (see README): `make demo` and `make test`; `make lint` runs ruff and mypy.
# Both create .venv if it is missing and install what they need into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch: a plain `pip install torch` on Linux x86_64 pulls multi-gigabyte CUDA wheels.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint install install-test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip setuptools wheel

# core + PyTorch backend: what the demo needs
$(VENV)/.installed-demo: $(PY) pyproject.toml
	$(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[torch]"
	touch $@

# + TensorFlow backend (tensorflow-cpu), MPE envs and pytest: what the tests need
$(VENV)/.installed-test: $(VENV)/.installed-demo
	$(PY) -m pip install -e ".[torch,tf,dev]"
	touch $@

install: $(VENV)/.installed-demo
install-test: $(VENV)/.installed-test

demo: install
	$(PY) examples/tictactoe_selfplay.py

test: install-test
	$(PY) -m pytest

# ruff (rules in pyproject.toml [tool.ruff]) and mypy (files and options in [tool.mypy])
lint: install-test
	$(PY) -m ruff check marl_note tests bench examples
	$(PY) -m mypy

bench: install-test
	$(PY) bench/bench_collect.py

clean:
	rm -rf $(VENV) runs .pytest_cache
