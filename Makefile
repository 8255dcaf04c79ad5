# Two entry points for a fresh machine (Python 3.10+ with pip and venv): `make demo`, `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.kwnb-installed

.PHONY: setup demo test test-fast bench clean

$(SETUP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[tf,test]"
	touch $(SETUP_STAMP)

setup: $(SETUP_STAMP)

# The multi-worker Keras example, headless: prefixed worker logs, the summary, curves.png in the run folder.
demo: setup
	KWNB_OFFLINE=$${KWNB_OFFLINE:-1} $(PY) -m kwnb run examples/mnist_keras.py -n 2

# Unit tests, real multi-worker runs, magics in IPython and in a real kernel, and the notebooks (nbval).
test: setup
	$(PY) -m pytest -ra tests notebooks --nbval-lax

test-fast: setup
	$(PY) -m pytest -ra tests -m "not slow"

# Side-by-side benchmarks (kwnb vs bare Popen, the tutorials' sleep, ipyparallel): benchmarks/results/latest.{md,json}
bench: setup
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .kwnb build *.egg-info
