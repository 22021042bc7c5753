"""The GPU pipeline: on a GPU machine (one H200), install the prebuilt wheels, build the initial
model, check the fast path, train SFT, then GRPO runs side by side, and pick each run's best export.

``training/tiny/gpu/run.sh`` runs the stages (``check``, ``sft``, ``grpo``); :mod:`~training.tiny.gpu.check`
compares the fast path with HF's forward on the GPU (``python -m training.tiny.gpu.check MODEL_DIR``);
``configs/`` holds the trainers' configs of the shipped runs. Nothing here is imported by the other
rooms.
"""

__all__: list[str] = []
