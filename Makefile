# Two set-up commands (see README): `make demo` and `make test`; `make lint` runs ruff and mypy, `make docs`
# builds the documentation site into site/. Each creates .venv if it is missing and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch: a plain `pip install torch` on Linux x86_64 pulls multi-gigabyte CUDA wheels.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test examples lint docs install install-test install-docs bench clean

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

# MkDocs, Material and mkdocstrings: what the documentation site needs (mkdocstrings reads the
# docstrings from the source files, so neither torch nor TensorFlow is needed here)
$(VENV)/.installed-docs: $(PY) pyproject.toml
	$(PY) -m pip install -e ".[docs]"
	touch $@

install: $(VENV)/.installed-demo
install-test: $(VENV)/.installed-test
install-docs: $(VENV)/.installed-docs

demo: install
	$(PY) examples/tictactoe_selfplay.py

# two workers (pytest-xdist): the suite is mostly CPU-bound start-ups and small runs, and one pytest
# process leaves the second core of a 2-core machine idle (VM: 13 min serial for 1,818 tests in the last
# serial CI; 9.5 min with -n 2 for 2,211 tests)
test: install-test
	$(PY) -m pytest -n 2

# every README and guide example run at the budget its page states, checking the figure the page states
# (learning runs: a few minutes on two workers, apart from the suite)
examples: install-test
	$(PY) -m pytest -n 2 -m examples tests/test_readme.py

# ruff (rules in pyproject.toml [tool.ruff]) and mypy (files and options in [tool.mypy])
lint: install-test
	$(PY) -m ruff check marl_note tests bench examples tools
	$(PY) -m mypy

# the site from mkdocs.yml and docs/ into site/; --strict makes every warning (a broken link, a docstring
# griffe cannot read) an error. NO_MKDOCS_2_WARNING hides Material's banner about MkDocs 2, a notice
# printed on every build, not a warning about these docs.
docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: install-test
	$(PY) bench/bench_collect.py

clean:
	rm -rf $(VENV) runs .pytest_cache site
