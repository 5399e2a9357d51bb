# The template's own commands. `make demo` scaffolds and runs a demo worker; `make test`
# runs the whole suite, the engine's included (what CI runs, and what to run before a push);
# `make check` is the inner loop (before each commit); `make test-full` is the nightly run.
PYTHON ?= python3
VENV := .venv
UV := $(VENV)/bin/uv
# Test processes: generated projects are baked and tested in parallel. More than the 2 cores
# CI has: much of the suite waits on SQS, on a visibility timeout or on a subprocess.
JOBS ?= 4

SCANNERS := .venv-scanners

.PHONY: install tools scanners scanners-lock test test-full check demo format bench bench-versions bench-instructions bench-tracing bench-memory bench-adaptive bench-priorities simulate fleet-check docs docs-versions docs-reference clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv

# Bytecode compiled once at install: the suite starts hundreds of Python processes on these
# environments, and with PYTHONDONTWRITEBYTECODE set each would compile every module it imports.
install: $(UV)
	$(UV) sync --quiet --all-groups --compile-bytecode --python $(VENV)/bin/python

# promtool (Debian's prometheus package) checks the generated alert rules; where it cannot
# be installed the suite falls back to a structure check and says so.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null)) || \
	    echo "promtool could not be installed: alert rules get a structure check only"; \
	  else echo "promtool not found: alert rules get a structure check only (apt-get install prometheus)"; fi; }

# checkov and zizmor, locked by hash, in an environment of their own (scanners/requirements.in).
$(SCANNERS)/bin/checkov: scanners/requirements.txt | $(UV)
	$(UV) venv --quiet --allow-existing --python $(VENV)/bin/python $(SCANNERS)
	$(UV) pip install --quiet --compile-bytecode --python $(SCANNERS)/bin/python --require-hashes -r scanners/requirements.txt
	touch $@

scanners: $(SCANNERS)/bin/checkov

scanners-lock: $(UV)
	$(UV) pip compile --quiet --universal --python-version 3.11 --generate-hashes scanners/requirements.in -o scanners/requirements.txt

# FULL=1 (`make test-full`, the nightly workflow): every answer set the bakes can lock baked
# and run end to end, not only the covering set (tests/matrix.py); the engine's property
# suites at ten times their everyday examples; the chaos suite at full scale.
FULL_RUN := TEMPLATE_TESTS_FULL=1 SCHEDULES=3000 COMPOSITIONS=3000 SHARED_COMPOSITIONS=1000 CHAOS_SCALE=full

test: install tools scanners
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(if $(filter 1,$(FULL)),$(FULL_RUN)) $(VENV)/bin/pytest -n $(JOBS) --dist loadgroup tests engine/tests

test-full:
	$(MAKE) test FULL=1

# The inner loop, before each commit: the engine's unit and model tests (the property suites
# at a tenth of their everyday examples, the few tests of several seconds marked `slow` left
# to `make test`) and one bake, locked, linted, type-checked and its handler tests run. No
# LocalStack; under a minute on 2 quiet cores. `make test` before a push.
CHECK_BAKE := idempotency-long-names
check: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" TEMPLATE_TESTS_NO_LOCALSTACK=1 SCHEDULES=30 COMPOSITIONS=30 SHARED_COMPOSITIONS=5 \
	  $(VENV)/bin/pytest -n 2 -q -m "not slow" engine/tests/unit engine/tests/model \
	  "tests/test_bake.py::test_a_checked_set_lints_type_checks_and_passes_its_handler_tests[$(CHECK_BAKE)]"

demo: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/demo.py

# The benchmark (bench/README.md): the generated worker against a hand-written loop, a boto3
# thread pool and Celery on one LocalStack, at the emulator's latency and with 20 ms added to
# every SQS request; regenerates docs/benchmarks.{md,json,png}. About an hour on 2 cores;
# BENCH_ARGS=--quick for a small run, BENCH_ARGS=--added-latency=10-40 for a spread.
bench: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python bench/run.py $(BENCH_ARGS)

# The generated worker on other versions of this repository beside this checkout, side by
# side in one run (bench/versions.py): REFS="<commit> [<commit> ...]"; the short-job rows,
# ROUNDS rounds (3 by default), at each of LATENCIES (added ms: 0,20 by default; 10-40 is a
# spread). Writes docs/benchmarks-versions.{md,json}. About 5 minutes a version on 2 cores.
bench-versions: install
	@test -n "$(REFS)" || { echo 'name the versions to compare: make bench-versions REFS="<commit> ..."'; exit 2; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python bench/versions.py $(REFS) --rounds $(or $(ROUNDS),3) $(if $(LATENCIES),--latencies $(LATENCIES))

# Instructions per message, counted under valgrind rather than timed (bench/instructions.py):
# the engine of each of REFS="<commit> [<commit> ...]" beside this checkout's, in one baked
# service, REPEATS times (2 by default), rows ROWS (noop:50,io10ms:100 by default). What CPU
# time on a shared machine cannot show: a change of a few percent. Writes
# docs/benchmarks-instructions.{md,json}. About 4 minutes a version on 2 cores.
bench-instructions: install
	@test -n "$(REFS)" || { echo 'name the versions to compare: make bench-instructions REFS="<commit> ..."'; exit 2; }
	@command -v valgrind >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -qq --no-install-recommends valgrind >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends valgrind >/dev/null); \
	  else echo "valgrind not found: apt-get install valgrind"; exit 2; fi; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python bench/instructions.py $(REFS) --repeats $(or $(REPEATS),2) $(if $(ROWS),--rows $(ROWS))

# What tracing costs: CPU per message with tracing off and on, side by side (bench/tracing.py;
# seconds). Writes docs/benchmarks-tracing.{md,json}.
bench-tracing: install
	$(VENV)/bin/python bench/tracing.py

# What the collector's pacing costs in memory beside CPU: peak RSS and CPU a job for 1, 4
# and 8 MiB jobs, with and without reference cycles, the engine's pacing beside CPython's
# threshold and a fixed 10,000 (bench/memory.py; seconds). Writes docs/benchmarks-memory.{md,json}.
bench-memory: install
	$(VENV)/bin/python bench/memory.py --out docs

# Adaptive concurrency at a downstream's knee: fixed at the knee, fixed far above it and
# adaptive, side by side on virtual time (bench/adaptive.py; seconds). Writes
# docs/benchmarks-adaptive.{md,json}.
bench-adaptive: install
	$(VENV)/bin/python bench/adaptive.py --out docs
# Priorities on one budget: the share of the first completions each priority gives two
# backlogged queues, side by side (bench/priorities.py; virtual time, seconds). Writes
# docs/benchmarks-priorities.{md,json}.
bench-priorities: install
	$(VENV)/bin/python bench/priorities.py --out docs

# The fleet simulator on the template's own bakes (bench/fleet.py): the default service on EKS
# and on ECS, and the ScaledJob answer, under the standard traffic shapes and a day at a
# million messages an hour, beside an oracle; writes docs/scaling/<platform>/ (report.md,
# report.json, plots), which docs/scaling.md quotes. Virtual time: about 20 minutes on 2 cores.
simulate: install
	$(VENV)/bin/python bench/fleet.py $(SIMULATE_ARGS)

# The simulator checked against real worker processes on LocalStack (bench/fleet_check.py):
# one small shape, completions and replicas minute by minute; writes
# docs/scaling-localstack.json. About 20 minutes of real time.
fleet-check: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python bench/fleet_check.py

# The docs site (mkdocs.yml, docs/): the reference pages written from the code
# (scripts/docs_reference.py), and the site built strictly into site/ (a broken link, anchor
# or page left out of the nav fails it).
docs-reference: install
	$(VENV)/bin/python scripts/docs_reference.py

docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The site as published (.github/workflows/docs.yml): site/ emptied, then a copy of the site
# built strictly from each engine release tag's own tree (site/<version>/; a tag with no
# mkdocs.yml is skipped and named), this checkout beside them as "<version> (unreleased)"
# while no tag names its version, site/versions.json for the version selector, site/latest/
# (the newest release) and site/index.html sending a reader there (scripts/docs_versions.py).
docs-versions: install
	$(VENV)/bin/python scripts/docs_versions.py

format: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/format_template.py

clean:
	rm -rf $(VENV) $(SCANNERS) .pytest_cache
