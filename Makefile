# The two commands a newcomer needs: `make eval` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
GPU_WHEELS ?= .gpu-wheels

.PHONY: setup setup-test eval demo test test-fast test-gpu-lock bench gpu-wheels setup-gpu
# The product: the venv with this package and the CPU serving stack.
setup:
	@scripts/setup.sh $(VENV)

# The GPU serving stack (Ray Serve LLM 2.58.1 + vLLM 0.26.0) for a GPU machine without network
# (docs/gpu.md): `make gpu-wheels` where there is network, then, on the GPU machine with the folder
# copied there, `make setup-gpu` (a venv over the image's Python 3.12 and CUDA torch).
gpu-wheels:
	@scripts/download_serving_gpu.sh $(GPU_WHEELS)

setup-gpu:
	@scripts/install_serving_gpu.sh $(GPU_WHEELS) $(VENV)

# What the tests add: system services, the SkyRL wheel, one venv per framework (OpenEnv, verifiers, Inspect),
# and the GPU lock's Ray and vLLM on CPU (VENV-gpulock, scripts/install_gpu_lock_cpu.sh).
setup-test: setup
	@scripts/setup.sh $(VENV) --tests

# Score the GRPO adapter on the 64-maze set through the embedded gateway (started if needed).
eval: setup
	$(VENV)/bin/maze-eval --adapter maze-grpo

# The same runner against a scripted BFS endpoint: seconds, no model.
demo: setup
	$(VENV)/bin/maze-demo

# Everything: the real services too (scripted server, S3, PostgreSQL, Ray, the embedded stack, a
# multi-node cluster); the 25 slowest tests are listed at the end. Two xdist workers: one runs the
# tests that start vLLM engines (the stack, the serving cluster), one after another (side by side
# they need ~20 GB and both cores), the other every other module meanwhile (tests/conftest.py).
# Then, once that stack is down, the GPU lock's check (test-gpu-lock); either failing fails the target.
# The last lines name every run's counts and failures (scripts/test_recap.py), so a log's tail tells all.
TEST_REPORTS ?= .test-reports
test: setup-test
	@status=0; rm -rf $(TEST_REPORTS); \
	$(PY) -m pytest -q -ra --durations=25 -n 2 --dist loadgroup --junitxml=$(TEST_REPORTS)/main.xml || status=$$?; \
	$(GPU_LOCK_TESTS) --junitxml=$(TEST_REPORTS)/gpu-lock.xml || status=$$?; \
	$(PY) scripts/test_recap.py main=$(TEST_REPORTS)/main.xml gpu-lock=$(TEST_REPORTS)/gpu-lock.xml; \
	exit $$status

# The tests marked engine_seam (adapter load and its refusals, coverage, parity, placement,
# Server-Timing) once more on the GPU lock's Ray Serve LLM and vLLM release, built for CPU, with the
# embedded stack in the production layout (standard, Serve's proxy): a change that breaks the GPU
# stack fails on every machine, not only on a GPU. Two xdist workers, as in the main run: the stack's
# tests on one, the engine tests that start an engine of their own on the other meanwhile.
GPU_LOCK_TESTS = MAZE_TEST_LAYOUT=standard $(VENV)-gpulock/bin/python -m pytest -q -ra --durations=10 -m engine_seam \
	-n 2 --dist loadgroup tests/serving/test_compat.py tests/serving/engine tests/serving/stack
test-gpu-lock: setup-test
	$(GPU_LOCK_TESTS)

# The inner loop: every test that starts no gateway stack, cluster or Ray head and takes seconds
# (the ones marked slow, CPU training runs among them, are left to `make test`), on two xdist
# workers, each test module on one of them (tests/conftest.py).
test-fast: setup-test
	$(PY) -m pytest -q -ra --durations=10 -n 2 --dist loadgroup -m "not slow and not needs_stack and not needs_cluster and not needs_ray"

# Every benchmark with a results file under benchmarks/results/ (docs/benchmarks.md); the ones that
# start the embedded stack or a cluster take minutes each, the walkthrough three trainings of ~10 min.
bench: setup
	$(PY) benchmarks/runner_overhead.py
	$(PY) benchmarks/rollout_cache.py
	$(PY) benchmarks/auth_overhead.py
	$(PY) benchmarks/paired_ab.py --runs 3 --variant-runs 1 --variants embedded,cpu-affinity-none,ray-niceness-0,glibc-mmap-default,mm-cache-4gb --blocks 16 --per-block 8 --c8-blocks 6 --c8-per-block 192
	$(PY) benchmarks/server_timing.py
	$(PY) benchmarks/lora_parity.py --rounds 5 --skip-mix --skip-eval
	$(PY) benchmarks/load_checks.py --adapters 12
	$(PY) benchmarks/time_to_servable.py
	$(PY) benchmarks/first_run.py --cold all --fresh-clone
	$(PY) benchmarks/soak.py --duration-s 600
	$(PY) benchmarks/recovery.py
	$(PY) benchmarks/fault_matrix.py
	$(PY) benchmarks/placement_calibrate.py
	$(PY) benchmarks/placement_sim.py
	$(PY) benchmarks/guard_error_rate.py
	$(PY) benchmarks/frameworks.py
	$(PY) benchmarks/walkthrough.py --trainer-seeds 42 1 2
	$(PY) benchmarks/walkthrough.py --gate --out benchmarks/results/walkthrough_gated.json
