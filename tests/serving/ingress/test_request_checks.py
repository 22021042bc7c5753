"""Request checks before anything reaches an engine (serving.ingress.request_checks, pure): image
bytes and pixels, per-request image counts, OpenAI's roles and ranges."""

from __future__ import annotations

import base64
import io
import time

import pytest
from PIL import Image

from serving.config import ServingConfig
from serving.errors import (
    BadRequest,
    ImageTooLarge,
    InvalidImage,
    RequestTooLarge,
)
from serving.ingress.request_checks import check_json_types, check_request, decoded_size, image_dimensions
from tests.support.gateway_stack import bomb_png_url


def _img(nbytes: int) -> str:
    return "data:image/png;base64," + base64.b64encode(b"x" * nbytes).decode()


def _png(side: int = 8, pad_to: int = 0) -> str:
    """A real PNG data URL, optionally padded (after IEND, which readers ignore) to ``pad_to`` bytes."""
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (255, 0, 0)).save(buf, format="PNG")
    raw = buf.getvalue()
    return "data:image/png;base64," + base64.b64encode(raw + b"\0" * max(0, pad_to - len(raw))).decode()


def check_messages(messages: list[dict], limits) -> int:
    """The number of images in ``messages`` once every request check has passed."""
    return check_request({"messages": messages}, limits).images


def _msg(*urls: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                         *({"type": "image_url", "image_url": {"url": u}} for u in urls)]}]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100])
def test_decoded_size_is_exact(n):
    assert decoded_size(_img(n)) == n


def test_limits():
    limits = ServingConfig.shipped("embedded").limits.model_copy(update={"max_images_per_request": 2,
                                                                         "max_image_bytes": 1000})
    assert check_messages(_msg(_png(), _png(pad_to=1000)), limits) == 2
    assert check_messages([{"role": "user", "content": "text only"}], limits) == 0
    with pytest.raises(BadRequest, match="data: URL"):
        check_messages(_msg("https://example.com/a.png"), limits)
    with pytest.raises(BadRequest, match="'video_url' is not served"):
        check_messages([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "file:///etc/passwd"}}]}],
                       limits)
    with pytest.raises(BadRequest, match="more than 2 images"):
        check_messages(_msg(_png(), _png(), _png()), limits)
    with pytest.raises(RequestTooLarge, match="1001 bytes"):
        check_messages(_msg(_png(pad_to=1001)), limits)
    with pytest.raises(InvalidImage, match="not a readable image"):
        check_messages(_msg(_img(10)), limits)


def test_pixel_bomb_refused_from_its_header():
    """A ~17 KB PNG that decodes to 12000 x 12000 pixels: refused (413) without decoding it."""
    limits = ServingConfig.shipped("embedded").limits
    bomb = bomb_png_url(12000, 12000)
    assert decoded_size(bomb) < limits.max_image_bytes  # the byte limit alone lets it through
    # CPU time, not wall time: the light test worker runs niced beside the stack, so its wall clock
    # says how busy the machine is; decoding the bomb would take seconds of CPU (and ~432 MB).
    t0 = time.process_time()
    with pytest.raises(ImageTooLarge, match="12000x12000 = 144000000 pixels") as info:
        check_messages(_msg(bomb), limits)
    assert time.process_time() - t0 < 0.5
    assert info.value.status_code == 413 and info.value.to_openai()["error"]["code"] == "image_too_large"
    assert image_dimensions(bomb_png_url(300, 200)) == (300, 200)


def test_pixels_per_request_bounded():
    limits = ServingConfig.shipped("embedded").limits.model_copy(update={"max_image_pixels": 64 * 64,
                                                                         "max_request_pixels": 3 * 64 * 64})
    assert check_request({"messages": _msg(_png(64), _png(64), _png(64))}, limits).pixels == 3 * 64 * 64
    with pytest.raises(ImageTooLarge, match="per request"):
        check_request({"messages": _msg(_png(64), _png(64), _png(64), _png(8))}, limits)
    with pytest.raises(ImageTooLarge, match="65x65"):
        check_request({"messages": _msg(_png(65))}, limits)


@pytest.mark.parametrize(("body", "match"), [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages\\[0\\].role: 'wizard'"),
    ({"messages": []}, "at least one message"),
    ({"messages": [{"role": "user", "content": [{"type": "image_embeds", "image_embeds": "AAAA"}]}]}, "image_embeds"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 17}, "n: 17 choices"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}, "temperature: 2.5 is outside"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 21}, "top_logprobs: 21"),
    ({"text_1": "a", "text_2": {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}},
     "text_2.content\\[0\\]: image_url must be a data: URL"),
])
def test_openai_validation(body, match):
    with pytest.raises(BadRequest, match=match):
        check_request(body, ServingConfig.shipped("embedded").limits)


# A fuzz run's 500 (POST /detokenize): token ids past 32 bits overflow the tokenizer inside the engine.
@pytest.mark.parametrize("body,match", [
    ({"model": "m", "tokens": [658, 7823402063.0, 1]}, r"tokens\[1\]: 7823402063.0 is not a token id"),
    ({"model": "m", "tokens": [-1]}, r"tokens\[0\]: -1 is not a token id"),
    ({"model": "m", "tokens": [1.5]}, r"tokens\[0\]: 1.5 is not a token id"),
    ({"model": "m", "prompt": [1, 2**40]}, r"prompt\[1\]"),
])
def test_token_ids_past_32_bits_are_refused(body, match):
    with pytest.raises(BadRequest, match=match):
        check_request(body, ServingConfig.shipped("embedded").limits)
    ok = {**body, body and next(iter(k for k in body if k != "model")): [0, 2**31 - 1, 658.0]}
    assert check_request(ok, ServingConfig.shipped("embedded").limits).images == 0


def test_roles_openai_accepts():
    messages = [{"role": r, "content": "x"} for r in ("system", "developer", "user", "assistant", "tool", "function")]
    assert check_request({"messages": messages}, ServingConfig.shipped("embedded").limits).images == 0


# The input class of a fuzz run's 500 (schemathesis' NEGATIVE mode on POST /v1/chat/completions):
# a field vLLM's request model reads in a ``mode="before"`` validator, on the raw body before
# pydantic checks types, of another JSON type: ``list(message["tool_calls"])`` on a number is
# "'int' object is not iterable", a TypeError pydantic passes on and Ray answers 500.
_CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
_NAMED = {"type": "function", "function": {"name": "f"}}
_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
# The failing draw's shape: unknown keys, an odd role, ``tool_calls`` a number (CI's report cut the
# body off before it; this is its first message with the field vLLM iterates).
FUZZ_MESSAGE = {"": {}, "GPU placement": [1.78e-91, 9557459, -629], "þ": {}, "pause_until": {}, "tool_call_id": None,
                "reasoning": None, "role": "_ºÐ\"\\µ", "tool_calls": 9557459}
TYPE_CONFUSED = [
    ({"thinking_token_budget": None, "messages": [FUZZ_MESSAGE]}, r"messages\[0\].tool_calls: must be an array, not a number"),
    ({**_CHAT, "messages": [{"role": "assistant", "content": "x", "tool_calls": True}]},
     r"messages\[0\].tool_calls: must be an array, not a boolean"),
    ({**_CHAT, "messages": [{"role": "user", "content": 7}]}, r"messages\[0\].content: must be a string or an array"),
    ({**_CHAT, "messages": [3]}, r"messages\[0\]: must be an object, not a number"),
    ({**_CHAT, "messages": 5}, "messages: must be an array, not a number"),
    ({**_CHAT, "messages": None}, "messages: must be an array, not null"),
    ({**_CHAT, "tools": 5, "tool_choice": _NAMED}, "tools: must be an array, not a number"),
    ({**_CHAT, "tools": "f", "tool_choice": _NAMED}, "tools: must be an array, not a string"),
    ({**_CHAT, "tools": [5], "tool_choice": _NAMED}, r"tools\[0\]: must be an object, not a number"),
    ({**_CHAT, "tools": [{"type": "function"}], "tool_choice": _NAMED}, r"tools\[0\].function: must be an object, not null"),
    ({**_CHAT, "tools": [{"type": "function", "function": {}}], "tool_choice": _NAMED},
     r"tools\[0\].function.name: must be a string, not null"),
    ({**_CHAT, "tool_choice": 1}, "tool_choice: must be a string or an object, not a number"),
    ({**_CHAT, "structured_outputs": 1.5}, "structured_outputs: must be an object, not a number"),
    ({"model": "m", "prompt": "hi", "structured_outputs": [1]}, "structured_outputs: must be an object, not an array"),
    ({**_CHAT, "stop": 3}, "stop: must be a string or an array, not a number"),
    ({**_CHAT, "logit_bias": [1]}, "logit_bias: must be an object, not an array"),
    ({**_CHAT, "chat_template_kwargs": "x"}, "chat_template_kwargs: must be an object, not a string"),
]


@pytest.mark.parametrize(("body", "match"), TYPE_CONFUSED)
def test_fields_vllm_reads_before_validating_are_type_checked(body, match):
    """400 naming the field, before vLLM's request model parses the body (it would raise a TypeError)."""
    with pytest.raises(BadRequest, match=match) as info:
        check_request(body, ServingConfig.shipped("embedded").limits)
    assert info.value.status_code == 400 and info.value.to_openai()["error"]["code"] == "bad_request"


def test_json_types_of_the_routes_fields_only():
    """Given the route model's fields, a field it does not have (and ignores) is not checked."""
    completion_fields = {"model", "prompt", "structured_outputs", "stop"}
    check_json_types({"model": "m", "prompt": "hi", "messages": 5, "tools": 1}, completion_fields)
    with pytest.raises(BadRequest, match="structured_outputs: must be an object"):
        check_json_types({"model": "m", "prompt": "hi", "structured_outputs": 0}, completion_fields)
    check_json_types([1, 2])  # not an object: the route's model answers (pydantic's 400)


@pytest.mark.parametrize("field, value, kind", [
    ("top_logprobs", "s", "a string"), ("prompt_logprobs", [], "an array"), ("logprobs", {"a": 0}, "an object"),
])
def test_logprob_counts_must_be_numbers(field, value, kind):
    """vLLM 0.26 compares these with 0 before it checks their type (a TypeError: a 500); the gateway says
    what is wrong first, on either vLLM."""
    with pytest.raises(BadRequest, match=f"{field}: must be a number, not {kind}"):
        check_json_types({**_CHAT, field: value})
    for good in (0, 5, 1.0, True, None):  # chat's logprobs is a boolean; a float or null is vLLM's to judge
        check_json_types({**_CHAT, field: good})


def test_well_typed_tool_use_and_structured_outputs_pass():
    limits = ServingConfig.shipped("embedded").limits
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    bodies = [
        {**_CHAT, "tools": [_TOOL], "tool_choice": _NAMED},
        {**_CHAT, "tools": [_TOOL], "tool_choice": "auto", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]}]},
        {**_CHAT, "structured_outputs": {"regex": "a+"}, "response_format": {"type": "json_object"}, "stop": ["x"],
         "logit_bias": {"1": 2.0}, "stop_token_ids": [1], "chat_template_kwargs": {"enable_thinking": False},
         "stream_options": None, "tools": None},
        {"model": "m", "prompt": [1, 2], "stop": "x"},
    ]
    for body in bodies:
        assert check_request(body, limits).images == 0


def test_no_field_vllm_parses_is_a_500():
    """Every field of vLLM's chat and completion request models (and each message's and tool's),
    set to a value of each JSON type: what the gateway's checks let through, vLLM's model parses or
    refuses with a validation error (a 400), never a TypeError, AttributeError or KeyError (a 500)."""
    pytest.importorskip("vllm")
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from serving.compat import vllm_client_errors

    limits = ServingConfig.shipped("embedded").limits
    values = [0, 1.5, True, "s", [], [0], {}, {"a": 0}, None]

    def bodies():
        for model, base in ((ChatCompletionRequest, _CHAT), (ChatCompletionRequest, {**_CHAT, "tools": [_TOOL],
                                                                                     "tool_choice": _NAMED}),
                            (CompletionRequest, {"model": "m", "prompt": "hi"})):
            for value in values:
                yield from ((model, field, {**base, field: value}) for field in model.model_fields)
                if model is CompletionRequest:
                    continue
                for key in ("role", "content", "tool_calls", "name", "tool_call_id", "reasoning", "function_call"):
                    yield model, f"messages[0].{key}", {**base, "messages": [{"role": "assistant", key: value}]}
                yield model, "messages[0]", {**base, "messages": [value]}
                yield model, "tools[0]", {**base, "tools": [value]}
                yield model, "tools[0].function", {**base, "tools": [{"type": "function", "function": value}]}
                yield model, "tools[0].function.name", {**base, "tools": [{"type": "function", "function": {"name": value}}]}
                yield model, "tool_choice.function", {**base, "tool_choice": {"type": "function", "function": value}}

    crashes, checked = [], 0
    for model, where, body in bodies():
        try:
            check_request(body, limits)
        except BadRequest:
            continue
        checked += 1
        try:
            model.model_validate(body)
        except (ValidationError, *vllm_client_errors(), ValueError):
            pass
        except Exception as exc:  # noqa: BLE001 - any other exception is a 500 at the ingress
            crashes.append(f"{model.__name__} {where}={body}: {type(exc).__name__}: {exc}")
    assert checked > 1000
    assert not crashes, "\n".join(crashes[:20])
