# Two commands do all the set-up on a fresh machine:
#   make demo   - install into .venv and run the demo (a local cluster, grpc+verbs against grpc)
#   make test   - install into .venv and run the tests (plus the soft-RoCE lane where it can run)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is optional (AlexNet compute, torch contenders, GPU tensors); TORCH= skips it.
# Pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: demo test install rxe-lane clean

$(BIN)/tensorverbs: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]' $(TORCH)
	touch $@

install: $(BIN)/tensorverbs

demo: install
	$(BIN)/tensorverbs demo

test: install
	$(BIN)/python -m pytest
	$(MAKE) rxe-lane

# RDMA verbs on a real verbs stack (soft-RoCE in a qemu guest); needs root, skipped otherwise
# unless RXE_LANE=require.
rxe-lane:
	@if [ "$$(id -u)" = 0 ] || [ "$(RXE_LANE)" = require ]; then bash .ci/rxe-lane.sh; \
	else echo "rxe lane skipped: it needs root (qemu guest with soft-RoCE)"; fi

clean:
	rm -rf $(VENV) .pytest_cache
