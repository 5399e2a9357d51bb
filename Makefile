# The template's own commands. `make demo` scaffolds and runs a demo worker; `make test`
# runs the whole suite (what CI runs).
PYTHON ?= python3
VENV := .venv
UV := $(VENV)/bin/uv
# Test processes: generated projects are baked and tested in parallel.
JOBS ?= 2

.PHONY: install test demo format bench clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv

install: $(UV)
	$(UV) sync --quiet --python $(VENV)/bin/python

test: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -n $(JOBS) --dist loadgroup tests

demo: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/demo.py

format: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/format_template.py

clean:
	rm -rf $(VENV) .pytest_cache
