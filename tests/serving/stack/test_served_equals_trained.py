"""Served = trained on the embedded gateway (tower LoRA on): each adapter version is served as HF + peft
computes it from the adapter's own files, or refused with the reason, never answered by the base.

The adapters are real peft adapters for maze-tiny (tests/support/peft_adapters.py). The refusals at
load are reached by writing a version's objects into the store directly, as a trainer writing to the
bucket itself (or an overwrite after publishing) would, since publishing checks them first.
"""

from __future__ import annotations

import base64

import openai
import pytest

from serving.adapters import AliasMove, WEIGHTS
from serving.adapters.files import content_version
from serving.adapters.refs import now
from tests.support.gateway_stack import image_messages, png_url
from tests.support.peft_adapters import build_adapter, hf_first_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.engine_seam]
TOLERANCE = 0.02  # per top-5 logprob: float32 engine against float32 HF, grouped CPU kernels


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft")
    return {kind: build_adapter(kind, root) for kind in ("tower", "lm", "lm-explicit", "renamed")}


def _reference(folder) -> list[tuple[str, float]]:
    png = base64.b64decode(png_url().split(",", 1)[1])
    text = image_messages()[0]["content"][0]["text"]
    return hf_first_logprobs(folder, png, text)


def _tokens(top) -> list[str]:
    # A token that is part of a UTF-8 character decodes to U+FFFD under HF and to "" under vLLM.
    return [t.replace("\ufffd", "") for t, _ in top]


def _assert_matches(served, reference) -> None:
    assert _tokens(served) == _tokens(reference), (served, reference)
    diffs = [abs(a - b) for (_, a), (_, b) in zip(served, reference, strict=True)]
    assert max(diffs) <= TOLERANCE, (served, reference)


@pytest.mark.parametrize("kind", ["tower", "lm"])
def test_an_all_linear_adapter_is_served_as_hf_and_peft_compute_it(stack, adapters, kind):
    """``tower``: trained only in the vision tower and merger; ``lm``: only in the language model."""
    stack.push(adapters[kind], f"set-{kind}", force=True)
    served = stack.first_logprobs(f"{stack.base}:set-{kind}")
    _assert_matches(served, _reference(adapters[kind]))
    assert [t for t, _ in served] != [t for t, _ in stack.first_logprobs(stack.base)]  # not the base


def _publish_unchecked(stack, folder, name: str) -> str:
    """Write ``folder`` as a version of ``name`` straight into the store (no publish-time checks)."""
    store = stack.store
    version = content_version(folder)
    store.versions.upload(folder, name, version)
    store.moves.point(name, AliasMove(version=version, at=now(), action="push", base=stack.base, rank=8))
    return version


def _refusal(stack, model: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as err:
        stack.first_logprobs(model)
    return err.value


def test_tensors_that_name_no_module_are_refused_at_load(stack, adapters):
    version = _publish_unchecked(stack, adapters["renamed"], "set-renamed")
    for _ in range(2):  # refused again without another load: the version's files cannot change
        exc = _refusal(stack, f"{stack.base}:set-renamed")
        assert exc.status_code == 422 and exc.body["code"] == "adapter_not_applied", exc.body
        assert "28 of 28 LoRA modules name no module of the base" in exc.body["message"], exc.body
        assert f"set-renamed@{version}" in exc.body["message"]
    assert stack.first_logprobs(stack.base)  # the replica still serves


def test_weights_overwritten_after_publishing_are_refused_at_load(stack, adapters):
    ref = stack.push(adapters["lm-explicit"], "set-overwritten", force=True)
    store = stack.store
    other = (adapters["lm"] / WEIGHTS).read_bytes()
    store.objects.put(store.versions.key("set-overwritten", ref.version, WEIGHTS), other)
    exc = _refusal(stack, f"{stack.base}:set-overwritten")
    assert exc.status_code == 422 and exc.body["code"] == "adapter_integrity_failed", exc.body
    assert f"not to version {ref.version}" in exc.body["message"], exc.body
    assert "s3://" not in exc.body["message"]


def test_verify_parity_checks_the_served_version_against_hf_and_peft_and_keeps_the_result(stack, adapters, tmp_path,
                                                                                         monkeypatch):
    import json

    import yaml
    from click.testing import CliRunner

    from serving.cli import main as maze_serve
    from tests.support.gateway_stack import KEY

    ref = stack.push(adapters["tower"], "set-parity", force=True)
    config = tmp_path / "serving.yaml"
    config.write_text(yaml.safe_dump(stack.cfg.model_dump(mode="json")))
    monkeypatch.setenv("MAZE_API_KEY", KEY)
    run = CliRunner().invoke(maze_serve, ["-c", str(config), "adapters", "verify", "set-parity", "--parity",
                                          "--endpoint", stack.base_url, "--json"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.stdout)
    assert out["ok"] and out["version"] == ref.version
    assert out["parity"]["ok"] and out["parity"]["reference"] == "hf+peft" and out["parity"]["frames"] == 4
    assert out["parity"]["max_abs_diff"] <= TOLERANCE, out
    history = CliRunner().invoke(maze_serve, ["-c", str(config), "adapters", "history", "set-parity"]).stdout
    assert f"{ref.version}\t" in history and "parity ok" in history, history
