# The two commands a newcomer needs: `make eval` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup eval demo test test-fast bench
setup:
	@scripts/setup.sh $(VENV)

# Score the GRPO adapter on the 64-maze set through the embedded gateway (started if needed).
eval: setup
	$(VENV)/bin/maze-eval --adapter maze-grpo

# The same runner against a scripted BFS endpoint: seconds, no model.
demo: setup
	$(VENV)/bin/maze-demo

# Everything: the real services too (scripted server, S3, PostgreSQL, Ray, the embedded stack, a
# multi-node cluster); the 25 slowest tests are listed at the end.
test: setup
	$(PY) -m pytest -q -ra --durations=25

# The inner loop: every test that starts no gateway stack, cluster or Ray head.
test-fast: setup
	$(PY) -m pytest -q -ra --durations=10 -m "not needs_stack and not needs_cluster and not needs_ray"

bench: setup
	$(PY) benchmarks/runner_overhead.py
	$(PY) benchmarks/eval_concurrency.py
	$(PY) benchmarks/gateway_bench.py
	$(PY) benchmarks/layout_ab.py
	$(PY) benchmarks/rollout_cache.py
	$(PY) benchmarks/lora_parity.py
	$(PY) benchmarks/recovery.py
	$(PY) benchmarks/auth_overhead.py
	$(PY) benchmarks/placement_calibrate.py
	$(PY) benchmarks/placement_sim.py
	$(PY) benchmarks/frameworks.py
