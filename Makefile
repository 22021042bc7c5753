# The two commands a newcomer needs: `make demo` (main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench
setup:
	@scripts/setup.sh $(VENV)

demo: setup
	$(VENV)/bin/maze-demo

test: setup
	$(PY) -m pytest -q -ra

bench: setup
	$(PY) benchmarks/runner_overhead.py
