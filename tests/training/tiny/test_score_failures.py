"""training.tiny.diagnostics.hf_scores's failure summary: which failed episodes ended stuck at a wall."""

from agent.runner import EpisodeRecord, StopReason, TurnRecord
from training.tiny.diagnostics.hf_scores import failure_modes


def _ep(success: bool, codes: list[str], stop: StopReason = StopReason.TURN_LIMIT) -> EpisodeRecord:
    # model_construct: only the fields the summary reads; the record's own wall_bumps counts them.
    turns = [TurnRecord.model_construct(feedback_code=c) for c in codes]
    return EpisodeRecord.model_construct(success=success, stop_reason=stop, turns=turns)


def test_stuck_needs_the_whole_tail_at_a_wall():
    records = [
        _ep(True, ["EXECUTED"] * 8 + ["HIT_WALL"] * 2, stop=StopReason.GOAL),
        _ep(False, ["EXECUTED"] * 10 + ["HIT_WALL"] * 5),  # stuck
        _ep(False, ["HIT_WALL"] * 4 + ["EXECUTED"] + ["HIT_WALL"] * 4),  # a move in the last 5: not stuck
        _ep(False, ["EXECUTED"] * 3, stop=StopReason.WRONG_STOP),  # stopped off the goal
    ]
    f = failure_modes(records)
    assert f == {"failed": 3, "failed_stuck_at_wall": 1, "failed_turn_limit": 2,
                 "wall_bump_share": round(15 / 37, 3)}


def test_the_diagnostics_default_to_the_shipped_models_folder():
    """``python -m training.tiny.diagnostics.hf_scores`` (and ``task_sweep``) with no ``--models-dir``
    score the repository's ``models/``, wherever their room sits in the lab."""
    from pathlib import Path

    from training.tiny.diagnostics import hf_scores, task_sweep

    models = Path(__file__).resolve().parents[3] / "models"
    assert hf_scores.MODELS_DIR == task_sweep.MODELS_DIR == models
    assert (models / "maze-grpo" / "adapter_config.json").is_file()
