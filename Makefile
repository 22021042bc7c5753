# The two commands a newcomer needs: `make eval` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup eval demo test bench
setup:
	@scripts/setup.sh $(VENV)

# Score the GRPO adapter on the 64-maze set through the embedded gateway (started if needed).
eval: setup
	$(VENV)/bin/maze-eval --adapter maze-grpo

# The same runner against a scripted BFS endpoint: seconds, no model.
demo: setup
	$(VENV)/bin/maze-demo

test: setup
	$(PY) -m pytest -q -ra

bench: setup
	$(PY) benchmarks/runner_overhead.py
	$(PY) benchmarks/eval_concurrency.py
	$(PY) benchmarks/gateway_bench.py
	$(PY) benchmarks/layout_ab.py
	$(PY) benchmarks/rollout_cache.py
	$(PY) benchmarks/lora_parity.py
	$(PY) benchmarks/recovery.py
	$(PY) benchmarks/placement_calibrate.py
	$(PY) benchmarks/placement_sim.py
