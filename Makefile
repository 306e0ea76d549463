# The two front-door commands: `make demo` and `make test`. Both create their virtualenvs and
# install what they need on a fresh machine that has only Python 3 and pip.
#
# Three environments, so that Apache Beam's pins (pillow<13, protobuf<7) never hide what users of
# the plain install get:
#   .venv         pip install -e '.[test,docs,masks]'  locked: constraints/plain.txt  (make test, lint, docs, demo)
#   .venv-beam    pip install -e '.[test,beam,masks]'  locked: constraints/beam.txt   (make test-beam)
#   .venv-latest* the same two installs, newest releases, no constraints      (make test-latest)
# A venv is rebuilt from scratch when pyproject.toml or its constraints file changes.
# `make lock` installs the newest releases, runs the suite on them, and only then writes them to
# constraints/*.txt. `make test-floor` tests the lowest versions pyproject.toml allows.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BEAM_VENV := .venv-beam
LATEST_VENV := .venv-latest
LATEST_BEAM_VENV := .venv-latest-beam
FLOOR_VENV := .venv-floor
MODEL_GARDEN := $(VENV)/model-garden
# What needs Apache Beam (skipped in .venv), plus the conformance matrix on Beam's Pillow 12.
BEAM_TESTS := tests/write/test_beam.py tests/write/test_beam_segmentation.py tests/encode/test_conformance.py
export TF_CPP_MIN_LOG_LEVEL ?= 3
# The suite on all cores (pytest-xdist; at most 8 workers: each imports TensorFlow, ~0.5 GB). Tests
# that drive real processes share one worker (tests/conftest.py, ONE_WORKER_MODULES). PYTEST_ARGS=
# runs it on one core.
PYTEST_ARGS ?= -n auto --maxprocesses 8 --dist loadgroup
, := ,

.PHONY: install sysdeps docs docs-screenshot model-garden test test-plain test-beam test-explore fuzz test-latest test-floor lock lint demo bench bench-read bench-plan bench-verify bench-update bench-report bench-detection bench-startup clean

# $(call venv,DIR,EXTRAS,CONSTRAINTS): a fresh DIR with `pip install -e .[EXTRAS]`, locked when CONSTRAINTS is set.
define venv
	rm -rf $(1)
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip $(if $(3),-c $(3))
	$(1)/bin/python -m pip install --quiet -e '.[$(2)]' $(if $(3),-c $(3))
	touch $(1)/.installed
endef

install: $(STAMP)

$(STAMP): pyproject.toml constraints/plain.txt
	$(call venv,$(VENV),test$(,)docs$(,)masks,constraints/plain.txt)

$(BEAM_VENV)/.installed: pyproject.toml constraints/beam.txt
	$(call venv,$(BEAM_VENV),test$(,)beam$(,)masks,constraints/beam.txt)


# The README's test command (and CI's, .ci/run): lint, the docs site, the whole suite on the locked
# plain install (tests/test_docs.py runs every example of README.md and docs/), then the Beam tests
# in the locked Beam install.
test: sysdeps test-plain test-beam

# Debian tools the tests drive: strace (fault injection at exact system calls, tests/write/test_faults.py),
# setpriv (util-linux: permission tests without root's capabilities), a CJK font (the contact
# sheet's names) and chromium (the report page opened in a real browser, tests/inspection/test_report_browser.py).
# Installed only when missing, and only where apt-get and root are there; strace, setpriv and
# chromium are then required, so those tests never pass by skipping.
SYSPKGS := strace:strace setpriv:util-linux fc-list:fontconfig chromium:chromium
sysdeps:
	@missing=""; for pair in $(SYSPKGS); do command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; done; \
	fc-list :lang=ja 2>/dev/null | grep -q . || missing="$$missing fonts-ipafont-gothic"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null \
	    || echo "warning: apt-get could not install$$missing"; \
	fi
	@for tool in strace setpriv chromium; do command -v $$tool >/dev/null || { echo "error: $$tool is missing (Debian: apt-get install strace util-linux chromium); the fault, permission and report tests need it"; exit 1; }; done

test-plain: lint docs $(MODEL_GARDEN)/.installed
	MODEL_GARDEN_PATH=$(CURDIR)/$(MODEL_GARDEN) $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The Model Garden's detection decoder (constraints/model-garden.txt), for the test that decodes our
# detection records with it: its packages without their dependencies, in a folder of their own that
# only that test's subprocess puts on its path.
model-garden: $(MODEL_GARDEN)/.installed

$(MODEL_GARDEN)/.installed: $(STAMP) constraints/model-garden.txt
	rm -rf $(MODEL_GARDEN)
	$(BIN)/python -m pip install --quiet --no-deps --target $(MODEL_GARDEN) -r constraints/model-garden.txt
	touch $@

# The property tests with random examples, ten times as many as `make test` runs (which draws the
# same ones every run: tests/conftest.py's "ci" profile). Not part of `make test`: pin what it finds
# as an ordinary test.
test-explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -q -m property

# The fuzz target (tests/fuzz): the COCO, VOC, YOLO and metadata readers run through the CLI on
# mutated copies of the seeded corpus, under RLIMIT_AS, FUZZ_CASES cases with a random seed (FUZZ_SEED=
# fixes one). `make test` runs 1,000 cases of one fixed seed (tests/fuzz/test_fuzz.py). Each finding's
# files and how to run its case again are kept in fuzz-failures/; pin what it finds as an ordinary test.
FUZZ_CASES ?= 5000
fuzz: $(STAMP)
	FUZZ_SEED=$(FUZZ_SEED) FUZZ_CASES=$(FUZZ_CASES) $(BIN)/python tests/fuzz/fuzz_run.py --out fuzz-failures

test-beam: $(BEAM_VENV)/.installed
	$(BEAM_VENV)/bin/python -c "import apache_beam"  # the Beam tests must run here, not skip
	$(BEAM_VENV)/bin/python -m pytest -q $(BEAM_TESTS)

# The same suite on today's newest releases (no constraints): a breaking upstream release shows
# here before users meet it. Reinstalls every time, so "newest" is today's.
test-latest:
	$(call venv,$(LATEST_VENV),test$(,)docs$(,)masks,)
	$(LATEST_VENV)/bin/ruff format --check .
	$(LATEST_VENV)/bin/ruff check .
	$(LATEST_VENV)/bin/mypy
	$(LATEST_VENV)/bin/python -m pytest -q $(PYTEST_ARGS)
	$(call venv,$(LATEST_BEAM_VENV),test$(,)beam$(,)masks,)
	$(LATEST_BEAM_VENV)/bin/python -m pytest -q $(BEAM_TESTS)

# Refresh the locks: what test-latest just installed and passed on becomes constraints/*.txt.
lock: test-latest
	{ sed -n '1,2p' constraints/plain.txt; echo "pip==$$($(LATEST_VENV)/bin/python -m pip --version | cut -d' ' -f2)"; \
	  $(LATEST_VENV)/bin/python -m pip freeze --exclude-editable | grep -v '^#'; } > constraints/plain.txt.new
	{ sed -n '1,2p' constraints/beam.txt; echo "pip==$$($(LATEST_BEAM_VENV)/bin/python -m pip --version | cut -d' ' -f2)"; \
	  $(LATEST_BEAM_VENV)/bin/python -m pip freeze --exclude-editable | grep -v '^#'; } > constraints/beam.txt.new
	mv constraints/plain.txt.new constraints/plain.txt
	mv constraints/beam.txt.new constraints/beam.txt

# The oldest versions pyproject.toml allows (constraints/floor.txt pins each lower bound): run
# when a lower bound moves. Not part of `make test` (a third TensorFlow install).
test-floor:
	$(call venv,$(FLOOR_VENV),test$(,)masks,constraints/floor.txt)
	$(FLOOR_VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# The house rules (ARCHITECTURE.md): formatted, linted and type-checked, or make test fails.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The docs site (mkdocs.yml): guides in docs/, the CLI and API references generated from the code.
# --strict: a broken link, a missing page or a docstring mkdocstrings cannot render fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# docs/images/report.png: the screenshot headless Chromium takes in the report's browser test of the
# sample data's report (converted and updated at a fixed SOURCE_DATE_EPOCH, its title `out`).
docs-screenshot: $(STAMP)
	REPORT_SCREENSHOT=$(CURDIR)/docs/images/report.png $(BIN)/python -m pytest -q -p no:randomly \
	  tests/inspection/test_report_browser.py -k test_the_sample_report_reads_right_in_chromium

# Two steps, into demo/ (ignored by git; the README's quick start then writes out/ itself): sample_data's
# class folders into demo/out/, then the same images with their boxes (sample_data/annotations.json, a
# COCO set) into demo/out-detection/, the Object Detection API's records.
demo: $(STAMP)
	rm -rf demo
	$(BIN)/img2tfrecord convert sample_data demo/out --split train=0.8,validation=0.2 --shards train=2,validation=1 --index
	$(BIN)/img2tfrecord inspect demo/out --verify --contact-sheet demo/contact-sheet.png
	$(BIN)/img2tfrecord convert sample_data demo/out-detection --annotations sample_data/annotations.json --split train=0.8,validation=0.2
	$(BIN)/img2tfrecord inspect demo/out-detection --verify

bench: $(STAMP)
	$(BIN)/python bench/run.py

bench-read: $(STAMP)  # only the read benchmark (load() vs a hand-written tf.data pipeline vs Keras), ~3 minutes
	$(BIN)/python bench/run.py --only read

bench-verify: $(STAMP)  # only the verify benchmark (inspect --verify against TensorFlow's decode floor and convert, 16,000 images; 4,000; 1 worker against all)
	$(BIN)/python bench/run.py --only verify

bench-update: $(STAMP)  # only the update benchmark (update +1% and compact vs a fresh conversion)
	$(BIN)/python bench/run.py --only update

bench-report: $(STAMP)  # only the report benchmark (report vs inspect without --verify, 100,000 images; converts them once)
	$(BIN)/python bench/run.py --only report

bench-detection: $(STAMP)  # only the detection benchmark (convert --annotations vs convert, 4,000 images), ~2 minutes
	$(BIN)/python bench/run.py --only detection

bench-startup: $(STAMP)  # only the start-up benchmark (30-image convert vs import + the record writer's load; first record vs the plan's end)
	$(BIN)/python bench/run.py --only startup

bench-plan: $(STAMP)  # only the plan benchmark (convert --dry-run on 1 M files vs a plain scandir walk), ~2 minutes
	$(BIN)/python bench/run.py --only plan

clean:
	rm -rf $(VENV) $(BEAM_VENV) $(LATEST_VENV) $(LATEST_BEAM_VENV) $(FLOOR_VENV) demo out sheet.png fuzz-failures site build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache bench/.cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
