# Two commands do all the set-up on a fresh machine:
#   make demo   - install the package alone into .venv and run the demo (a local cluster,
#                 grpc+verbs against grpc)
#   make test   - install into .venv with the test and bench extras, torch and Ray (make
#                 install does that alone) and run the tests: the native core's unit tests, the
#                 type check (mypy), then the Python suite and, beside it, the soft-RoCE lane
#                 where it can run
# and for the native core (csrc/):
#   make sanitize  - its unit tests and its libFuzzer targets' seeds under AddressSanitizer + UBSan
#                    (clang), then the unit tests under ThreadSanitizer
#   make fuzz      - each of its libFuzzer targets for FUZZ_SECONDS (default 30), on that build
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is optional (AlexNet compute, torch contenders, GPU tensors); TORCH= skips it.
# Pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0
# Ray is optional too (tensorverbs.ray and its tests in tests/on_ray); RAY= skips it.
RAY ?= ray==2.60.0
# pyproject.toml's build-system.requires, installed into .venv so that a reinstall rebuilds
# only what changed in build/ (no build isolation); ninja for the CMake presets too
BUILD_DEPS := 'scikit-build-core>=0.11' 'nanobind>=2.5' ninja
CORE_SOURCES := $(shell find csrc -type f)
FUZZ_SECONDS ?= 30

# configure and build one of csrc/CMakePresets.json's presets (build/<preset>); preset
# also runs its tests
build = cd csrc && export PATH="$(abspath $(BIN)):$$PATH" && cmake --preset $(1) \
	&& cmake --build --preset $(1)
preset = $(call build,$(1)) && ctest --preset $(1)

.PHONY: demo test pytest soak install deps sanitize fuzz rxe-lane clean

$(BIN)/ninja:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(BUILD_DEPS)

# the package and what it depends on: all that the demo uses
$(BIN)/tensorverbs: pyproject.toml $(CORE_SOURCES) | $(BIN)/ninja
	PYTHON=$(PYTHON) bash tools/install-deps.sh build
	$(BIN)/pip install --quiet --no-build-isolation -e .
	touch $@

# and what the tests and benchmarks use beyond it: the test and bench extras, torch, Ray
# (reinstalling the package rebuilds nothing that $(BIN)/tensorverbs built)
$(VENV)/.extras: pyproject.toml $(BIN)/tensorverbs
	$(BIN)/pip install --quiet --no-build-isolation -e '.[test,bench]' $(TORCH) $(RAY)
	touch $@

install: $(VENV)/.extras

# the Debian packages of the native core's tests, sanitizers and fuzzers (apt-get as root)
deps:
	PYTHON=$(PYTHON) bash tools/install-deps.sh

demo: $(BIN)/tensorverbs
	$(BIN)/tensorverbs demo

# the Python suite and the soft-RoCE lane (a qemu guest) run side by side; each one's
# output comes when it ends
test: deps install
	$(call preset,release)
	$(BIN)/mypy
	@$(MAKE) --no-print-directory -j2 --output-sync=target pytest rxe-lane

pytest: install
	$(BIN)/python -m pytest

# the long soaks and sweeps the test suite leaves out (pytest's "soak" marker)
soak: install
	$(BIN)/python -m pytest -m soak

sanitize: deps $(BIN)/ninja
	$(call preset,asan)
	$(call preset,tsan)

# the fuzzers are built by the asan preset (whose tests run each over its seeds); the corpus
# grows in build/fuzz/corpus/<name>; a crashing input is left in build/fuzz/
fuzz: deps $(BIN)/ninja
	$(call build,asan)
	@mkdir -p build/fuzz; for fuzzer in build/asan/fuzzers/fuzz_*; do \
	  name=$${fuzzer##*/fuzz_}; log=build/fuzz/$$name.log; \
	  mkdir -p build/fuzz/corpus/$$name; \
	  echo "fuzz_$$name: $(FUZZ_SECONDS)s (log: $$log)"; \
	  $$fuzzer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build/fuzz/ \
	    build/fuzz/corpus/$$name build/asan/seeds/$$name > $$log 2>&1 \
	    || { tail -n 60 $$log; echo "fuzz_$$name FAILED"; exit 1; }; \
	  grep -E '^(Done|stat::new_units_added)' $$log; \
	done

# RDMA verbs on a real verbs stack (soft-RoCE in a qemu guest); needs root, skipped otherwise
# unless RXE_LANE=require.
rxe-lane:
	@if [ "$$(id -u)" = 0 ] || [ "$(RXE_LANE)" = require ]; then RXE_GUEST_EXTRAS='$(TORCH)' bash .ci/rxe-lane.sh; \
	else echo "rxe lane skipped: it needs root (qemu guest with soft-RoCE)"; fi

clean:
	rm -rf $(VENV) .pytest_cache build
