# Two commands do everything from a fresh clone: `make demo` and `make test`.
# The virtual environment is created when missing and reinstalled only when pyproject.toml or
# constraints.txt change (the stamp file records the last install). `make test` also installs the
# test-only peers of requirements-test.txt (ultralytics, AGPL: never a dependency of vision_attn),
# without their declared dependencies, again only when that file changes, and Chromium (the report's
# browser test) where it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export NO_ALBUMENTATIONS_UPDATE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

CHROMIUM := /usr/bin/chromium

.PHONY: demo test benchmark install clean browser

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# tests/search starts a PostgreSQL server of its own: the Debian server binaries (initdb, pg_ctl) are
# installed when missing (as root, or through sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(TEST_STAMP): requirements-test.txt $(STAMP)
	$(PY) -m pip install -q --no-deps -c constraints.txt -r requirements-test.txt
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
		{ $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q postgresql; }
	touch $(TEST_STAMP)

# Trains a small ViT on the built-in handwritten digits (demo:digits) and prints its final accuracy
# and run folder (runs/demo_digits/); `vision-attn demo` is the model-zoo tour.
demo: $(STAMP)
	$(VENV)/bin/vision-attn train cls --config demo_digits --overwrite

# The report's test opens a page in headless Chromium (the Debian package): installed here where it is
# missing and apt-get is there (CI runs as root); elsewhere the test fails saying how to install it.
browser:
	@test -x $(CHROMIUM) || ! command -v apt-get >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) $(TEST_STAMP) browser
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n 2 -m "not benchmark"

# Every CPU suite of tools/bench.py (`python tools/bench.py --list`), with its default settings: hours on a
# small machine. The test-only peers (ultralytics) are installed for the suites that measure against them;
# a suite whose peer is missing is skipped. One JSON record per suite in runs/benchmarks/.
benchmark: $(STAMP) $(TEST_STAMP)
	$(PY) tools/bench.py --group cpu --out runs/benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
