#!/usr/bin/env bash
# The GPU pipeline on a GPU machine (one H200): install the prebuilt wheels, build the
# initial model, check the fast path, train SFT, then GRPO. Stages: check sft grpo (any subset).
# Results go to runs/; the caller copies what it needs from there. SFT_ARGS adds flags to the SFT run,
# BUILDER_ARGS to the initial model's (e.g. another depth).
# The wheels it installs come from scripts/gpu_wheels.sh (into .whl/).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi -L
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
mkdir -p runs
[ -d runs/init ] || [ "$1" = grpo ] || python3 -m training.tiny.model.builder --out runs/init --seed 0 ${BUILDER_ARGS:-} 2>&1 | tail -2
for stage in "$@"; do
  case "$stage" in
    check) python3 -m training.tiny.gpu.check runs/init 2>&1 | grep -v Warning ;;
    sft) python3 -m training.tiny.trainers.sft --config training/tiny/gpu/configs/sft.yaml --init runs/init --out runs/sft ${SFT_ARGS:-} 2>&1 | grep -v Warning | tee runs/sft.log ;;
    grpo)
      # Several variants at once (one small model leaves the GPU mostly idle). GRPO_RUNS is a
      # ';'-separated list of "name flags..."; by default one run per learning rate in GRPO_LRS.
      runs="${GRPO_RUNS:-}"
      if [ -z "$runs" ]; then for lr in ${GRPO_LRS:-0.0005 0.001 0.002}; do runs="$runs;lr$lr --lr $lr ${GRPO_ARGS:-}"; done; fi
      names=""
      # GRPO_FROM: a grpo_pick folder from an earlier invocation; each run named there resumes from its
      # latest checkpoint and keeps appending to its metrics (each invocation may land on a fresh machine).
      if [ -n "${GRPO_FROM:-}" ]; then
        for p in "$GRPO_FROM"/*/ckpt; do
          r=$(basename "$(dirname "$p")"); mkdir -p runs/$r/export
          cp -r "$p" runs/$r/ckpt; cp "$(dirname "$p")/metrics.jsonl" runs/$r/export/
        done
      fi
      IFS=';' read -ra variants <<< "$runs"
      for v in "${variants[@]}"; do
        [ -z "${v// }" ] && continue
        read -r name flags <<< "$v"
        d=runs/grpo_$name; names="$names $d"; mkdir -p $d
        # shellcheck disable=SC2086  # flags are words on purpose
        # A hard wall-clock cap (GRPO_TIMEOUT_S) so a slow step can never eat the caller's
        # budget; the exports written so far stay usable. Few threads each: the runs share the CPUs.
        OMP_NUM_THREADS=${GRPO_THREADS:-4} timeout "${GRPO_TIMEOUT_S:-86400}" python3 -m training.tiny.trainers.grpo --config training/tiny/gpu/configs/grpo.yaml \
          --ckpt-path $d/ckpt --export-path $d/export $flags > $d.log 2>&1 &
      done
      wait
      for d in $names; do echo "== $d"; grep "Step" $d.log | tail -1; grep -h "pass_at_1" $d/export/metrics.jsonl | python3 -c "import sys, json; print([(r['global_step'], r['eval/all/pass_at_1'], r.get('eval/all_tasks/pass_at_1')) for r in map(json.loads, sys.stdin)])"; tail -2 $d.log; done
      # GRPO_PICK_BY=all_tasks picks on all 768 tasks (runs with --eval-all-tasks true), not the eval seeds.
      by=""; [ "${GRPO_PICK_BY:-}" = all_tasks ] && by="--by-all-tasks"
      # shellcheck disable=SC2086
      python3 -m training.tiny.trainers.grpo_select $by runs/grpo_pick $names
      # With $OUT set, writes there one archive per pick (each under 16 MiB) and one metrics.tgz with
      # every run's metrics and log; $OUT holds at most 8 files, so at most 6 runs per invocation.
      if [ -n "${OUT:-}" ]; then
        python3 -m training.tiny.trainers.grpo_select --pack runs/grpo_pick "$OUT"
        # shellcheck disable=SC2046
        tar czf "$OUT/metrics.tgz" $(for d in $names; do echo "$d/export/metrics.jsonl $d.log"; done)
      fi ;;
    *) echo "unknown stage $stage" ;;
  esac
done
