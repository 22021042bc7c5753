#!/usr/bin/env bash
# The GPU pipeline as run on the device machine (one H200): install the carried wheels, build the
# initial model, check the fast path, train SFT, then GRPO. Stages: check sft grpo (any subset).
# Results go to runs/; the caller copies what it needs from there.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi -L
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
mkdir -p runs
[ -d runs/init ] || [ "$1" = grpo ] || python3 -m training.model_builder --out runs/init --seed 0 2>&1 | tail -2
for stage in "$@"; do
  case "$stage" in
    check) python3 -m training.gpu_check runs/init 2>&1 | grep -v Warning ;;
    sft) python3 -m training.sft --config training/configs/sft.yaml --init runs/init --out runs/sft 2>&1 | grep -v Warning | tee runs/sft.log ;;
    grpo)
      # Several learning rates at once: one small model leaves the GPU mostly idle.
      names=""
      for lr in ${GRPO_LRS:-0.0003 0.001 0.003}; do
        d=runs/grpo_lr$lr; names="$names $d"
        python3 -m training.grpo_local --config training/configs/grpo.yaml --lr $lr \
          --ckpt-path $d/ckpt --export-path $d/export ${GRPO_ARGS:-} > $d.log 2>&1 &
      done
      wait
      for d in $names; do grep "Step" $d.log | tail -1; grep -h "pass_at_1" $d/export/metrics.jsonl | python3 -c "import sys, json; print([(r['global_step'], r['eval/all/pass_at_1']) for r in map(json.loads, sys.stdin)])"; tail -3 $d.log; done
      python3 -m training.grpo_select runs/grpo_pick $names ;;
    *) echo "unknown stage $stage" ;;
  esac
done
