# Quick start: `make demo` (the main job) and `make test` (the whole suite, the docs' build too).
# Both make their own virtual environment in .venv and install what they need; `make test` makes
# a second one, .venv-pf, for the PaddleFormers host's tests.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# What the demo runs; the suite adds its tools. Each stamp installs its extras once.
DEMO_EXTRAS ?= cpu,visualdl,examples
TEST_EXTRAS ?= cpu,visualdl,examples,dev
DEMO_STAMP  := $(VENV)/.installed-demo
STAMP       := $(VENV)/.installed
# PaddleFormers' Trainer cannot share .venv with paddlenlp 3.0.0b4 (their datasets, pyarrow and
# numpy pins part), so its tests get a venv of their own, every version from the lock: pip then
# resolves in seconds, and a new release of one of its ~120 dependencies changes nothing here.
PF_VENV     ?= .venv-pf
PF_PY       := $(PF_VENV)/bin/python
PF_LOCK     := .ci/paddleformers-lock.txt
PF_STAMP    := $(PF_VENV)/.installed
# The suite on two workers (pytest-xdist): the tests on one module's fixture share a worker
# (NOTE [ one worker for a module's fixture ] in tests/conftest.py); the 15 slowest are listed.
PYTEST_ARGS ?= -n 2 --dist loadgroup --durations=15

.PHONY: demo test test-paddleformers lint docs dist bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	touch $@

$(PF_VENV)/bin/python:
	$(PYTHON) -m venv $(PF_VENV)
	$(PF_PY) -m pip install --quiet --upgrade pip

# Only what tests/paddleformers runs: the host, pytest and pytest-xdist (PYTEST_ARGS), and
# hypothesis (tests/conftest.py imports it); not the docs' or lint's tools.
$(PF_STAMP): pyproject.toml $(PF_LOCK) | $(PF_VENV)/bin/python
	$(PF_PY) -m pip install --quiet -c $(PF_LOCK) -e ".[cpu,paddleformers]" pytest pytest-xdist \
		hypothesis
	touch $@

# The main job: a fixed batch of 32 against dynbatch's default recipe told that batch
# (padding-free micro-batches, updates of 32 with lengths mixed), for the same 2 epochs, with
# paddlenlp BERT, offline (ChnSentiCorp's hotel reviews from examples/data, a character
# vocabulary, a small BERT): a few minutes on 2 CPU cores. Output: runs/demo/.
demo: $(DEMO_STAMP)
	$(PY) examples/bert_chnsenticorp.py --model tiny --modes fixed,dynamic --epochs 2 \
		--batch-size 32 --max-train-samples 3000 --max-len 128 --output-dir runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples benchmarks
	$(VENV)/bin/ruff format --check src tests examples benchmarks
	$(VENV)/bin/mypy

# The manual (docs/, Sphinx + MyST, furo): warnings are errors, so a broken reference, a link
# to a file that does not open the NOTE it names, a public parameter no docstring describes, a
# public name the API reference lists not once, or a docstring autodoc cannot read fails the
# build. Output: docs/_build/html.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The PaddleFormers host's tests (and its package's doctests, once it has one) in .venv-pf,
# named by path: the main suite never collects them, nor this run the paddlenlp ones
# (conftest.py). Under CI a skip there fails (tests/paddleformers/conftest.py says why).
test-paddleformers: $(PF_STAMP)
	$(PF_PY) -m pytest $(PYTEST_ARGS) tests/paddleformers \
		$(wildcard src/dynbatch/integrations/paddleformers)

test: lint docs test-paddleformers
	$(PY) -m pytest $(PYTEST_ARGS)

# The install the README gives, from a wheel: build sdist and wheel, twine check, install the
# wheel into a fresh venv and run dynbatch from it (.ci/dist says what it checks). CI runs it.
dist: $(STAMP)
	bash .ci/dist $(PY)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(PF_VENV) docs/_build .pytest_cache .ruff_cache .mypy_cache .hypothesis
