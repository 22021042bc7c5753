"""The lab's configs describe every field (what it is and why), like the launcher's spec."""

from __future__ import annotations

import pytest

from training.tiny.demos import DemoConfig
from training.tiny.grpo_config import GRPOConfig
from training.tiny.model_builder import BuilderConfig
from training.tiny.sft import SFTConfig


@pytest.mark.parametrize("model", [GRPOConfig, SFTConfig, DemoConfig, BuilderConfig])
def test_every_lab_config_field_has_a_description(model):
    missing = [name for name, field in model.model_fields.items() if not field.description]
    assert not missing, f"{model.__name__} fields without a description: {missing}"


def test_grpo_config_is_importable_from_the_trainer():
    from training.tiny import grpo_local

    assert grpo_local.GRPOConfig is GRPOConfig
