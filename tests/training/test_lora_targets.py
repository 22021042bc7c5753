"""Training asks for what will be served: the spec's default LoRA targets stay in the language model,
and ``maze-train submit`` refuses targets that reach the vision tower when the serving config it
publishes to has tower LoRA off (training.lora_targets)."""

from __future__ import annotations

import re

import pytest
import yaml

from serving.config import CONFIG_DIR, REPO_ROOT
from tests.support.cli import assert_one_line, closed_port
from tests.training.test_cli_failures import maze_train
from training.lora_targets import QWEN3_VL_TOWER, effective_targets, serving_mismatch, tower_hits
from training.spec import LANGUAGE_MODEL_TARGETS, TrainSpec

ALL_LINEAR_REFUSED = (
    "model.lora.target_modules 'all-linear' reaches the vision tower and its merger ('all-linear' wraps every "
    "linear layer, the tower's and its merger's included), which the gateway this job publishes to does not apply "
    "(serving config embedded: lora.vision_tower is off), so every exported step would be refused at publish: "
    "target the language model's layers only (the default, "
    "'.*language_model.*\\\\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)') or publish to a serving "
    "config with lora.vision_tower: true (--serving-config)")


def _spec(targets: str, **extra) -> TrainSpec:
    return TrainSpec.model_validate({"model": {"lora": {"target_modules": targets}}, **extra})


def test_the_default_targets_are_the_language_models_linear_layers_on_a_real_qwen3_vl():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    assert TrainSpec().model.lora.target_modules == LANGUAGE_MODEL_TARGETS
    model = Qwen3VLForConditionalGeneration.from_pretrained(str(REPO_ROOT / "models" / "maze-tiny"),
                                                            dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=4, target_modules=LANGUAGE_MODEL_TARGETS))
    wrapped = {name for name, module in model.named_modules() if hasattr(module, "lora_A")}
    # maze-tiny: 4 layers x q, k, v, o, gate, up, down; none in the tower or its mergers
    assert len(wrapped) == 28 and all(".language_model.layers." in name for name in wrapped)
    # the tower names the check relies on are maze-tiny's (a real Qwen3-VL checkpoint)
    assert set(QWEN3_VL_TOWER) <= {name.removeprefix("base_model.model.") for name, _ in model.named_modules()}


def test_the_reference_spec_matches_every_shipped_serving_config():
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        tower = bool((yaml.safe_load(path.read_text()).get("lora") or {}).get("vision_tower"))
        assert serving_mismatch(TrainSpec(), vision_tower=tower, serving_config=path.stem) is None, path


def test_all_linear_is_refused_with_tower_lora_off_and_accepted_with_it_on():
    assert serving_mismatch(_spec("all-linear"), vision_tower=False) == ALL_LINEAR_REFUSED
    assert serving_mismatch(_spec("all-linear"), vision_tower=True) is None
    # rank 0 trains the full model: no adapter, nothing to compare
    assert serving_mismatch(TrainSpec.model_validate(
        {"model": {"lora": {"target_modules": "all-linear", "rank": 0}}}), vision_tower=False) is None


@pytest.mark.parametrize(("targets", "hit"), [
    (r".*\.(q_proj|qkv)", "it matches model.visual.blocks.0.attn.qkv"),
    (r".*visual.*", "it matches model.visual.blocks.0.attn.qkv, model.visual.blocks.0.attn.proj, "
                    "model.visual.blocks.0.mlp.linear_fc1, ..."),
    (r".*merger.*linear_fc\d", "it matches model.visual.merger.linear_fc1, model.visual.merger.linear_fc2, "
                               "model.visual.deepstack_merger_list.0.linear_fc1, ..."),
    (["q_proj", "v_proj", "qkv"], "it matches model.visual.blocks.0.attn.qkv"),
    (["linear_fc1"], "it matches model.visual.blocks.0.mlp.linear_fc1, model.visual.merger.linear_fc1, "
                     "model.visual.deepstack_merger_list.0.linear_fc1"),
    (["q_proj", "multi_modal_projector.linear_1"], "it matches multi_modal_projector.linear_1"),
])
def test_targets_that_reach_the_tower(targets, hit):
    assert tower_hits(targets) == [hit]


@pytest.mark.parametrize("targets", [
    LANGUAGE_MODEL_TARGETS,
    r".*language_model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj",  # training/tiny's random adapters
    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],  # training/tiny's LORA_TARGETS
    r"^(?!.*visual).*\.(q_proj|v_proj)",  # names the tower only to exclude it
])
def test_targets_that_stay_in_the_language_model(targets):
    assert tower_hits(targets) == []


def test_extra_overrides_win_over_the_field():
    spec = TrainSpec.model_validate({"extra_overrides": ["trainer.policy.model.lora.target_modules='all-linear'"]})
    assert effective_targets(spec) == ("all-linear", "extra_overrides' trainer.policy.model.lora.target_modules")
    assert serving_mismatch(spec, vision_tower=False).startswith(
        "extra_overrides' trainer.policy.model.lora.target_modules 'all-linear' reaches the vision tower")


def test_a_target_that_is_no_regex_is_an_error():
    with pytest.raises(ValueError, match=re.escape("target_modules '(q_proj' is not a regular expression")):
        serving_mismatch(_spec("(q_proj"), vision_tower=False)


def test_submit_refuses_before_contacting_the_cluster(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"model": {"lora": {"target_modules": "all-linear"}}}))
    address = f"http://127.0.0.1:{closed_port()}"
    assert_one_line(maze_train("submit", "--address", address, str(spec)), 2,
                    "reaches the vision tower", "serving config embedded: lora.vision_tower is off")
    # with tower LoRA on in the serving config it publishes to, it goes on (to the cluster, which is down: 3)
    serving = yaml.safe_load((CONFIG_DIR / "embedded.yaml").read_text())
    serving["lora"]["vision_tower"] = True
    tower_on = tmp_path / "tower-on.yaml"
    tower_on.write_text(yaml.safe_dump(serving))
    assert_one_line(maze_train("submit", "--address", address, "--serving-config", str(tower_on), str(spec)), 3,
                    address.removeprefix("http://"))
    # the local trainer always targets the language model: not checked
    assert_one_line(maze_train("submit", "--address", address, "--trainer", "local", str(spec)), 3)
    assert_one_line(maze_train("submit", "--address", address, "--serving-config", "no-such-config", str(spec)), 2,
                    "no shipped serving config 'no-such-config'")
