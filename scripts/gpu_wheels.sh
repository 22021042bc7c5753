#!/usr/bin/env bash
# The wheels training/tiny/gpu/run.sh installs on a GPU machine that has torch, transformers and peft
# but no internet and not this project's other needs (pydantic, gymnasium), pinned to the
# transformers/peft versions the shipped models were made with. Pure-python except pydantic-core
# (cp312, x86-64 manylinux). Usage: scripts/gpu_wheels.sh [DIR] (default .whl); then carry DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.whl}"
mkdir -p "$dir"
# One version of each: pip's --no-deps install refuses two. Keep pydantic and pydantic-core in step.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" \
  transformers==5.24.0 peft==0.21.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0 gymnasium==1.4.0 farama-notifications==0.0.6
ls "$dir"
