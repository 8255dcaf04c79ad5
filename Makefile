# Two entry points for a fresh machine (Python 3.10+ with pip and venv): `make demo`, `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.kwnb-installed

# Debian packages that let tests run instead of skipping (see system-deps).
BROWSER_PKGS := chromium
SLURM_PKGS := slurm-wlm munge
NETWORK_PKGS := slirp4netns passt
NODE_PKGS := nodejs npm
# The JupyterHub tests' proxy (tests/hub_support.py looks here first): npm's, in a prefix of the venv's own.
CHP := $(VENV)/node/node_modules/.bin/configurable-http-proxy

# $(call find_python,X.Y): a shell loop printing the first pythonX.Y on PATH that runs (a pyenv shim may not), else
# pyenv's own; nothing where there is none (tests/interpreter_support.py's python_of looks the same way).
find_python = for p in $$(command -v python$(1)) $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1)*/bin/python$(1); do \
	$$p -c 'import venv' 2>/dev/null && echo $$p && break; done

# Colab's runtime as Google publishes it (constraints/colab.txt) needs its Python.
PYTHON_COLAB ?= $(shell $(call find_python,3.13))
COLAB_VENV := .venv-colab
COLAB_STAMP := $(COLAB_VENV)/.kwnb-installed
COLAB_WIDGETS8_VENV := .venv-colab-widgets8
COLAB_WIDGETS8_STAMP := $(COLAB_WIDGETS8_VENV)/.kwnb-installed

.PHONY: setup colab-env colab-widgets8-env system-deps demo test test-fast bench clean

# Every venv's packages are installed by tools/install.py: by uv, from a venv of its own here, with the settings this
# machine's pip would use, in a third of pip's time; by pip where uv cannot stand in (that script says when).
UV_VENV := .uv
UV := $(UV_VENV)/bin/uv
INSTALL = $(PYTHON) tools/install.py --uv $(UV_VENV)

$(UV):
	@rm -rf $(UV_VENV) && $(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/python -m pip install --quiet uv \
		|| echo "install: uv could not be installed, so pip installs the venvs"

# The venv with kwnb (editable) and its tf and test extras; redone when pyproject.toml changes. Its pip is the
# newest (the tests ask it for plans: pip install --dry-run --report), as in every venv below.
$(SETUP_STAMP): pyproject.toml | $(UV)
	$(PYTHON) -m venv --without-pip $(VENV)
	$(INSTALL) $(VENV) --quiet --upgrade pip
	$(INSTALL) $(VENV) --quiet -e ".[tf,test]"
	touch $(SETUP_STAMP)

# configurable-http-proxy 5 needs node 20 (Debian 12 has 18): 4.6 where node is older. Without npm, one line
# says the JupyterHub tests skip; make goes on.
$(CHP): | $(SETUP_STAMP)
	@if ! command -v npm >/dev/null; then echo "setup: no npm (make system-deps installs it), so the JupyterHub tests skip"; \
	else major=$$(node -p 'process.versions.node.split(".")[0]'); \
		npm install --silent --no-fund --no-audit --prefix $(VENV)/node \
			configurable-http-proxy@$$([ "$$major" -ge 20 ] && echo 5 || echo 4.6) \
		|| echo "setup: npm could not install configurable-http-proxy, so the JupyterHub tests skip"; fi

setup: $(SETUP_STAMP) $(CHP)

# A second venv holding Colab's published versions, then kwnb (editable, tf extra) installed under the same
# constraints (and pytest, for the core tests on its Python 3.13): tests/test_colab_env.py checks that this changed
# none of them, runs the core tests there and runs notebooks in its kernel.
# About 40 s and 2.4 GB by uv alone, 97 s by pip (docs/testing.md); without python3.13, one line says its tests skip.
$(COLAB_STAMP): pyproject.toml constraints/colab.txt | $(UV)
	@if [ -z "$(PYTHON_COLAB)" ]; then echo "colab-env: no python3.13, so the Colab environment's tests skip"; \
	else rm -rf $(COLAB_VENV) && $(PYTHON_COLAB) -m venv --without-pip $(COLAB_VENV) \
		&& $(INSTALL) $(COLAB_VENV) --quiet --upgrade pip \
		&& $(INSTALL) $(COLAB_VENV) --quiet -r constraints/colab.txt \
		&& $(INSTALL) $(COLAB_VENV) --quiet -c constraints/colab.txt -e ".[tf]" pytest pytest-timeout \
		&& touch $(COLAB_STAMP) || echo "colab-env: the install failed, so the Colab environment's tests skip"; fi

colab-env: $(COLAB_STAMP)

# Colab's runtime with ipywidgets 8 in place of its 7.7.1, for ipykernel 6.17 in JupyterLab 4
# (tests/test_jupyterlab_ui.py): JupyterLab 4's widget manager draws ipywidgets 8's widgets only (an ipywidgets 7
# kernel asks for @jupyter-widgets/controls ^1.5.0, it has 2.0.0). A venv over .venv-colab's packages (a .pth
# adds its site-packages after the venv's own) where pip installs ipywidgets 8 and what it lacks, everything
# else held by constraints/colab.txt; pip leaves .venv-colab as it is ("outside environment"). Seconds and a
# few MB (docs/testing.md); without .venv-colab, one line says the test with that kernel skips.
$(COLAB_WIDGETS8_STAMP): $(COLAB_STAMP) constraints/colab.txt
	@if [ ! -e $(COLAB_STAMP) ]; then echo "colab-widgets8-env: no $(COLAB_VENV), so JupyterLab's test with ipykernel 6.17 skips"; \
	else rm -rf $(COLAB_WIDGETS8_VENV) && $(COLAB_VENV)/bin/python -m venv --without-pip $(COLAB_WIDGETS8_VENV) \
		&& colab=$$($(COLAB_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
		&& own=$$($(COLAB_WIDGETS8_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
		&& echo "import site; site.addsitedir('$$colab')" > $$own/colab.pth \
		&& grep -v '^ipywidgets==' constraints/colab.txt > $(COLAB_WIDGETS8_VENV)/constraints.txt \
		&& $(COLAB_WIDGETS8_VENV)/bin/python -m pip install --quiet -c $(COLAB_WIDGETS8_VENV)/constraints.txt "ipywidgets>=8,<9" \
		&& touch $(COLAB_WIDGETS8_STAMP) || echo "colab-widgets8-env: the install failed, so JupyterLab's test with ipykernel 6.17 skips"; fi

colab-widgets8-env: $(COLAB_WIDGETS8_STAMP)

# $(call apt_install,PACKAGES,APT-GET OPTIONS,TESTS THAT NEED THEM): installs those of PACKAGES dpkg does
# not list as installed, as root or through passwordless sudo, trying first without `apt-get update` (the
# lists may be there already). Where it cannot, one line says which tests skip and why; make goes on.
define apt_install
missing=; for p in $(1); do \
	dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
apt="env DEBIAN_FRONTEND=noninteractive apt-get"; [ "$$(id -u)" = 0 ] || apt="sudo -n $$apt"; \
if [ -z "$$missing" ]; then :; \
elif ! command -v apt-get >/dev/null; then echo "system-deps: no apt-get to install$$missing, so $(3) skip"; \
elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	echo "system-deps: not root and no passwordless sudo to install$$missing, so $(3) skip"; \
else echo "system-deps: installing$$missing (for $(3))"; \
	$$apt install -y -qq $(2)$$missing >/dev/null 2>&1 \
	|| { $$apt update -qq && $$apt install -y -qq $(2)$$missing >/dev/null; } \
	|| echo "system-deps: could not install$$missing, so $(3) skip"; \
fi
endef

# What some tests need from Debian: the browser tests drive its chromium; the Slurm tests start a private
# one-node Slurm from slurm-wlm and munge (tests/slurm_support.py), which needs no recommended package;
# the private-network tests give a run's namespace outside access with slirp4netns and passt's pasta; the
# JupyterHub tests run configurable-http-proxy, which `make setup` installs with npm (Debian's nodejs and npm
# unless an npm is there already: NodeSource's nodejs carries its own, and conflicts with Debian's npm).
# Costs seven dpkg-query calls when everything is there.
system-deps:
	@$(call apt_install,$(BROWSER_PKGS),,the browser tests)
	@$(call apt_install,$(SLURM_PKGS),--no-install-recommends,the Slurm tests)
	@$(call apt_install,$(NETWORK_PKGS),--no-install-recommends,the private-network tests)
	@command -v npm >/dev/null || { $(call apt_install,$(NODE_PKGS),--no-install-recommends,the JupyterHub tests); }

# The host Pythons no other venv has (the main one is 3.11, .venv-colab 3.13): a venv for each of 3.10 and 3.12
# (.venv-py310 from 310) with kwnb editable, its base dependencies and pytest, no TensorFlow (its paths run in the
# main venv and in .venv-colab); tests/test_pythons.py runs kwnb there. `make test` builds them, `make clean`
# removes them. About 10 s each by uv alone (29 s by pip), 250 MB each (docs/testing.md); without that Python, one
# line says its tests skip.
OTHER_PYTHONS := 310 312
OTHER_STAMPS := $(OTHER_PYTHONS:%=.venv-py%/.kwnb-installed)
.PHONY: pythons clean-pythons

.venv-py%/.kwnb-installed: pyproject.toml | $(UV)
	@version=$$(echo $* | sed 's/^3/3./'); python=$$($(call find_python,$$version)); \
	if [ -z "$$python" ]; then echo "pythons: no python$$version, so its tests skip"; \
	else rm -rf .venv-py$* && $$python -m venv --without-pip .venv-py$* \
		&& $(INSTALL) .venv-py$* --quiet --upgrade pip \
		&& $(INSTALL) .venv-py$* --quiet -e . pytest pytest-timeout \
		&& touch $@ || echo "pythons: the install into .venv-py$* failed, so its tests skip"; fi

pythons: $(OTHER_STAMPS)
clean: clean-pythons
clean-pythons:
	rm -rf $(OTHER_PYTHONS:%=.venv-py%)

# The multi-worker Keras example, headless: prefixed worker logs, the summary, curves.png in the run folder.
demo: setup
	KWNB_OFFLINE=$${KWNB_OFFLINE:-1} $(PY) -m kwnb run examples/mnist_keras.py -n 2

# Unit tests, real multi-worker runs, magics in IPython and in a real kernel, and the notebooks (nbval);
# with system-deps first, so that the browser and Slurm tests run wherever the machine can provide them.
# What they need is installed four at a time (apt and the venvs wait on the network, not the CPUs; output kept
# per target), then the proxy, which needs system-deps' npm. uv comes first, alone: every venv waits for it (about
# 20 s on a fresh machine, most of it downloading its 20 MB wheel; 20 and 30 s beside apt's installs).
# Three pytest-xdist workers, a file each at a time (the longest first: conftest.py). Much of the suite waits on
# processes it started (a browser, a hub, a cluster's daemons, pip on the network); with two workers the cores idled
# in those waits, with three they stay busy (pytest 1077-1269 s against 1389; docs/testing.md, "Three files at a
# time"). Three lost time while the corpus ran four programs at once and every task imported TensorFlow itself:
# crowding then cost more CPU than the waits left. PARALLEL=0 runs one at a time.
PARALLEL ?= 3
XDIST = $(if $(filter 0,$(PARALLEL)),,-n $(PARALLEL) --dist loadfile --no-loadscope-reorder)
PREPARED := system-deps $(SETUP_STAMP) colab-env colab-widgets8-env pythons
# kwnb is installed editable, so nothing compiled its modules; where PYTHONDONTWRITEBYTECODE is set (CI), every
# process (kernels, tasks, painters, `kwnb run`) then compiled the ones it imports: 0.30 CPU-s for the engine's 85
# modules from source against 0.17 compiled. compileall writes the bytecode whatever that variable says.
test:
	@$(MAKE) --no-print-directory $(UV)
	@$(MAKE) --no-print-directory -j4 -O $(PREPARED)
	@$(MAKE) --no-print-directory setup
	@$(PY) -m compileall -q kwnb
	$(PY) -m pytest -ra --durations=40 $(XDIST) tests notebooks --nbval-lax

# The tests not marked slow, without system-deps (a quick loop should not wait for apt).
test-fast: setup
	$(PY) -m pytest -ra $(XDIST) tests -m "not slow"

# Side-by-side benchmarks (kwnb vs bare Popen, the tutorials' sleep, ipyparallel): benchmarks/results/latest.{md,json}
bench: setup
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# Back to a fresh clone (the venv, run folders, build output); installed Debian packages stay.
clean:
	rm -rf $(VENV) $(COLAB_VENV) $(COLAB_WIDGETS8_VENV) $(UV_VENV) .kwnb build *.egg-info
