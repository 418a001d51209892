# Two commands do everything from a fresh clone: `make demo` and `make test`.
# The virtual environment is created when missing and reinstalled only when pyproject.toml or
# constraints.txt change (the stamp file records the last install).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export NO_ALBUMENTATIONS_UPDATE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test benchmark install clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vision-attn demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not benchmark"

benchmark: $(STAMP)
	$(PY) tools/bench_vit.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
