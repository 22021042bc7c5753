"""The lab's configs describe every field (what it is and why), like the launcher's spec."""

from __future__ import annotations

import pytest

from training.tiny.data import DemoConfig
from training.tiny.model import BuilderConfig
from training.tiny.trainers import GRPOConfig, SFTConfig


@pytest.mark.parametrize("model", [GRPOConfig, SFTConfig, DemoConfig, BuilderConfig])
def test_every_lab_config_field_has_a_description(model):
    missing = [name for name, field in model.model_fields.items() if not field.description]
    assert not missing, f"{model.__name__} fields without a description: {missing}"


def test_grpo_config_is_importable_from_the_trainer():
    from training.tiny.trainers import grpo

    assert grpo.GRPOConfig is GRPOConfig
