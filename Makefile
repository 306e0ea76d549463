# The two front-door commands: `make demo` and `make test`. Both create .venv and install
# what they need on a fresh machine that has only Python 3 and pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: install test lint demo bench bench-read bench-plan clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,beam]'
	touch $(STAMP)

test: lint
	$(BIN)/python -m pytest -q

# The house rules (ARCHITECTURE.md): formatted, linted and type-checked, or make test fails.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

demo: $(STAMP)
	rm -rf out
	$(BIN)/img2tfrecord convert sample_data out --split train=0.8,validation=0.2 --shards train=2,validation=1 --index
	$(BIN)/img2tfrecord inspect out --verify --contact-sheet out/contact-sheet.png

bench: $(STAMP)
	$(BIN)/python bench/run.py

bench-read: $(STAMP)  # only the read benchmark (load() vs a hand-written tf.data pipeline vs Keras), ~3 minutes
	$(BIN)/python bench/run.py --only read

bench-plan: $(STAMP)  # only the plan benchmark (convert --dry-run on 1 M files vs a plain scandir walk), ~2 minutes
	$(BIN)/python bench/run.py --only plan

clean:
	rm -rf $(VENV) out build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache bench/.cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
