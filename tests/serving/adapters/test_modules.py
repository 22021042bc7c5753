"""The check before publishing that the engine serves an adapter as trained (serving.adapters.modules),
on real peft adapters of the repo's maze-tiny (a Qwen3-VL checkpoint), built once for the module."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from serving.adapters import inspect_adapter
from serving.adapters.files import validate_adapter
from serving.adapters.modules import AdapterModules, check_servable, unsupported_features
from serving.adapters.modules import LANGUAGE_MODEL, UNMATCHED, VISION_MERGER, VISION_TOWER
from serving.config import REPO_ROOT
from serving.errors import AdapterInvalid, AdapterNotServable
from tests.support.adapter_store import bucket_keys, make_adapter
from tests.support.peft_adapters import build_adapter

BASE = "models/maze-tiny"
TOWER_MESSAGE = ("24 of 52 LoRA modules are in the vision tower and its merger (e.g. model.visual.blocks.0.attn.proj, "
                 "model.visual.blocks.0.attn.qkv, model.visual.blocks.0.mlp.linear_fc1, ...) and hold trained "
                 "(non-zero) weights, which this gateway does not apply (lora.vision_tower is off): set "
                 "lora.vision_tower: true in the serving config or retrain without them (target the language "
                 "model's layers only)")


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft")
    kinds = {"tower": "tower", "lm": "lm", "explicit": "lm-explicit", "renamed": "renamed", "dora": "dora"}
    return {key: build_adapter(kind, root) for key, kind in kinds.items()}


def test_tower_trained_all_linear_is_refused_with_tower_lora_off_and_accepted_with_it_on(adapters):
    with pytest.raises(AdapterNotServable) as err:
        validate_adapter(adapters["tower"], base_source=BASE, max_rank=32)
    assert str(err.value) == TOWER_MESSAGE
    assert isinstance(err.value, AdapterInvalid) and err.value.status_code == 400
    assert err.value.to_openai()["error"]["code"] == "adapter_not_servable"
    assert validate_adapter(adapters["tower"], base_source=BASE, max_rank=32, vision_tower=True)["r"] == 8

    report = inspect_adapter(adapters["tower"], base_source=BASE)
    assert report.checked and report.total == 52
    assert report.counts() == {LANGUAGE_MODEL: 28, "embeddings": 0, VISION_TOWER: 16, VISION_MERGER: 8, UNMATCHED: 0}
    assert report.trained == set(report.modules[VISION_TOWER]) | set(report.modules[VISION_MERGER])
    assert "model.visual.deepstack_merger_list.0.linear_fc1" in report.modules[VISION_MERGER]
    assert set(report.lost()) == {VISION_TOWER, VISION_MERGER}
    assert inspect_adapter(adapters["tower"], base_source=BASE, vision_tower=True).lost() == {}


def test_all_linear_with_only_the_language_model_trained_is_accepted(adapters):
    cfg = validate_adapter(adapters["lm"], base_source=BASE, max_rank=32)
    report = check_servable(adapters["lm"], cfg, base_source=BASE)
    # the tower's modules are there, at peft's zero init: leaving them out changes nothing
    assert report.counts()[VISION_TOWER] == 16 and report.trained == set(report.modules[LANGUAGE_MODEL])
    assert report.lost() == {} and report.problems() == []


def test_explicit_language_model_targets_are_accepted(adapters):
    validate_adapter(adapters["explicit"], base_source=BASE, max_rank=32)
    report = inspect_adapter(adapters["explicit"], base_source=str(REPO_ROOT / BASE))
    assert set(report.modules) == {LANGUAGE_MODEL} and len(report.trained) == 28
    assert report.summary().startswith("28 LoRA modules (28 language model), 28 trained; applied: language model")


def test_tensors_under_another_prefix_are_refused_naming_them(adapters):
    message = ("28 of 28 LoRA modules name no module of the base maze-tiny (e.g. transformer.decoder.layers.0.mlp."
               "down_proj, transformer.decoder.layers.0.mlp.gate_proj, transformer.decoder.layers.0.mlp.up_proj, "
               "...): the adapter was saved with other module names; re-export it with the base's names")
    for vision_tower in (False, True):
        with pytest.raises(AdapterNotServable) as err:
            validate_adapter(adapters["renamed"], base_source=BASE, max_rank=32, vision_tower=vision_tower)
        assert str(err.value) == message


def test_dora_is_refused_as_vllm_refuses_it(adapters):
    with pytest.raises(AdapterNotServable, match=r"refuses this adapter's config: vLLM does not yet support DoRA\.$"):
        validate_adapter(adapters["dora"], base_source=BASE, max_rank=32)


def test_a_base_not_readable_here_groups_by_name_alone(adapters):
    hub = "Qwen/Qwen3-VL-8B-Instruct"
    report = inspect_adapter(adapters["tower"], base_source=hub)
    assert not report.checked and hub in report.unchecked and "names not checked" in report.summary()
    assert report.counts() == {LANGUAGE_MODEL: 28, "embeddings": 0, VISION_TOWER: 16, VISION_MERGER: 8, UNMATCHED: 0}
    with pytest.raises(AdapterNotServable, match="24 of 52 LoRA modules are in the vision tower"):
        report.raise_if_lost()
    # a hub id whose name is the adapter's base: the whole of validate_adapter, by name only
    with pytest.raises(AdapterNotServable, match="vision tower"):
        validate_adapter(adapters["tower"], base_source="someorg/maze-tiny", max_rank=32)
    # names the base may not have cannot be told apart without its weights: the engine decides at load
    renamed = inspect_adapter(adapters["renamed"], base_source=hub)
    assert set(renamed.modules) == {LANGUAGE_MODEL} and renamed.problems() == []
    assert not inspect_adapter(adapters["renamed"], base_source=None).checked


def test_a_sharded_base_is_read_from_its_index(adapters, tmp_path):
    from serving.adapters.modules import read_safetensors_header

    names = read_safetensors_header(REPO_ROOT / BASE / "model.safetensors")[0]
    weight_map = {k: f"model-0000{i % 2 + 1}-of-00002.safetensors" for i, k in enumerate(names)}
    (tmp_path / "maze-tiny").mkdir()
    (tmp_path / "maze-tiny" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    report = inspect_adapter(adapters["renamed"], base_source=str(tmp_path / "maze-tiny"))
    assert report.checked and report.counts()[UNMATCHED] == 28


def test_bf16_weights_are_read_from_their_bytes(adapters, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "bf16"
    shutil.copytree(adapters["tower"], folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
    f32 = inspect_adapter(adapters["tower"], base_source=BASE)
    assert inspect_adapter(folder, base_source=BASE).trained == f32.trained and len(f32.trained) == 24


def test_negative_zero_is_zero(tmp_path):
    from safetensors.numpy import save_file

    folder = make_adapter(tmp_path / "a")
    stem = "base_model.model.model.visual.blocks.0.attn.qkv"
    save_file({f"{stem}.lora_A.weight": np.ones((8, 32), np.float32),
               f"{stem}.lora_B.weight": -np.zeros((32, 8), np.float32)}, str(folder / "adapter_model.safetensors"))
    assert inspect_adapter(folder, base_source=BASE).trained == frozenset()


def test_the_store_tests_adapter_is_still_accepted(tmp_path):
    # names of the base's layer 0 (shapes are not compared: the engine checks them at load)
    validate_adapter(make_adapter(tmp_path / "a"), base_source=BASE, max_rank=32)


@pytest.mark.parametrize(("change", "reason"), [
    ({"use_dora": True}, "vLLM does not yet support DoRA."),
    ({"lora_bias": True}, "vLLM does not support LoRA bias (lora_bias)."),
    ({"modules_to_save": ["lm_head"]}, "Unsupported modules_to_save: ['lm_head']."),
    ({"init_lora_weights": "pissa"}, "vLLM does not support init_lora_weights='pissa'."),
    ({"init_lora_weights": "loftq"}, "Inits such as PiSSA, OLoRA, CorDA and LoftQ modify the base model weights"),
    ({"alora_invocation_tokens": [1, 2]}, "vLLM does not support Activated LoRA (aLoRA)."),
    ({"layer_replication": [[0, 2]]}, "vLLM does not support layer_replication."),
    ({"use_bdlora": {"block": 2}}, "vLLM does not support block-diagonal LoRA (BD-LoRA)."),
    ({"use_qalora": True}, "vLLM does not support QALoRA."),
    ({"bias": "all"}, "Adapter bias is not supported (bias='all')."),
])
def test_peft_features_vllm_refuses(tmp_path, change, reason):
    folder = make_adapter(tmp_path / "a")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    assert unsupported_features(cfg) == []
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(AdapterNotServable) as err:
        validate_adapter(folder, base_source=BASE, max_rank=32)
    assert reason in str(err.value)


@pytest.mark.parametrize("init", [True, False, "gaussian", "eva", "orthogonal", "mica", "lora_ga"])
def test_inits_that_only_pick_the_starting_weights_are_accepted(init):
    cfg = {"r": 8, "lora_alpha": 8, "target_modules": ["q_proj"]}
    assert unsupported_features({**cfg, "init_lora_weights": init}) == []
    assert unsupported_features({**cfg, "modules_to_save": ["classifier", "score"]}) == []
    missing = "Missing required configuration fields: ['lora_alpha', 'target_modules']."
    assert unsupported_features({"r": 8}) == [missing]


def test_rank_pattern_counts_toward_the_rank_limit(tmp_path):
    folder = make_adapter(tmp_path / "a")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, "rank_pattern": {"v_proj": 64}}))
    with pytest.raises(AdapterInvalid, match="adapter rank 64 exceeds the gateway's max_lora_rank 32"):
        validate_adapter(folder, base_source=BASE, max_rank=32)


def test_push_refuses_before_uploading_anything(store, adapters):
    with pytest.raises(AdapterNotServable, match="vision tower"):
        store.push(adapters["tower"], "tower-lora", base="maze-tiny", base_source=BASE)
    assert bucket_keys(store) == []
    ref = store.push(adapters["tower"], "tower-lora", base="maze-tiny", base_source=BASE, vision_tower=True)
    assert store.resolve("tower-lora").version == ref.version


def test_the_report_is_a_plain_value():
    report = AdapterModules(modules={LANGUAGE_MODEL: ("a.q_proj",)}, trained=frozenset({"a.q_proj"}),
                            applied=frozenset({LANGUAGE_MODEL}), vision_tower=False, base="x/maze-tiny")
    assert report.total == 1 and report.lost() == {} and report.checked
