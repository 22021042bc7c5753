"""Request checks the gateway runs before anything reaches an engine (pure functions).

:func:`check_request` runs on every engine route (chat, completions, embeddings, score, tokenize,
...) before the request is handed to the engine, so vLLM never parses or decodes what fails here:

* OpenAI's validation where vLLM is laxer: message roles are OpenAI's, ``messages`` is not empty,
  content parts are the types this gateway serves (``text``, ``image_url``), sampling fields are
  within OpenAI's ranges, ``n`` is bounded;
* the JSON type of the fields vLLM reads before it checks their types (:data:`JSON_TYPES`): its
  request models' ``mode="before"`` validators run on the raw body and iterate ``messages``,
  ``list()`` each message's ``tool_calls``, index ``tools[i]["function"]["name"]`` and call
  ``structured_outputs.get``, so a number there is a ``TypeError`` that pydantic passes on and Ray
  answers 500. :func:`check_json_types` is for the raw JSON, before vLLM's model parses it (the
  engine routes' dependency in the gateway); :func:`check_request` gets the parsed request, too
  late for it (it runs it on a raw body too);
* images arrive inline as ``data:`` URLs: the gateway never fetches remote URLs (that would let
  any caller make the cluster download arbitrary content), so ``http(s)://`` and ``file:`` URLs
  are a 400;
* image counts, decoded bytes and pixels (per image and per request) are bounded by
  :class:`~serving.config.LimitsSpec`. Pixels come from the image header (PIL reads only the
  header on open), so a few-KB PNG that would decode to gigabytes is refused without decoding.
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from PIL import Image, UnidentifiedImageError

from serving.config import LimitsSpec
from serving.errors import BadRequest, ImageTooLarge, InvalidImage, RequestTooLarge

# OpenAI's chat roles ("function" is deprecated there but still accepted).
OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Content parts the served models take (images and text); "refusal" is OpenAI's assistant part.
SERVED_PART_TYPES = frozenset({"text", "image_url", "refusal"})
# OpenAI's documented ranges for sampling fields vLLM checks more loosely (or not at all).
OPENAI_RANGES = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2),
                 "top_logprobs": (0, 20)}
# The JSON type of each request field vLLM's request models read in ``mode="before"`` validators (on
# the raw body, before pydantic checks types; vllm/entrypoints/openai/chat_completion/protocol.py:
# ``_normalize_messages_before``, ``check_system_message_content_type``, ``check_tool_usage``,
# ``check_structured_outputs_count``, and completion/protocol.py's), and of the other object and
# array fields of the engine requests beside them, so the rule does not hang on which of them vLLM
# happens to touch first; and the logprob counts, which vLLM 0.26's ``check_logprobs`` compares with 0
# before any type check (a TypeError, so a 500, for a string; vLLM 0.32 checks their type first).
# ``null`` is every field's default but ``messages``'.
_NUMBER = (int, float)  # a JSON number (or a boolean, which Python compares as one)
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "messages": (list,), "tools": (list,), "tool_choice": (str, dict), "structured_outputs": (dict,),
    "response_format": (dict,), "stream_options": (dict,), "kv_transfer_params": (dict,),
    "chat_template_kwargs": (dict,), "mm_processor_kwargs": (dict,), "media_io_kwargs": (dict,),
    "logit_bias": (dict,), "vllm_xargs": (dict,), "stop": (str, list), "stop_token_ids": (list,),
    "allowed_token_ids": (list,), "bad_words": (list,), "logprob_token_ids": (list,), "documents": (list,),
    "logprobs": _NUMBER, "top_logprobs": _NUMBER, "prompt_logprobs": _NUMBER,
}
# The same for each message's fields (``tool_calls``: vLLM calls ``list()`` on it).
MESSAGE_JSON_TYPES: dict[str, tuple[type, ...]] = {"content": (str, list), "tool_calls": (list,)}
_NOT_NULL = frozenset({"messages"})  # vLLM iterates ``data.get("messages", [])``: an explicit null too
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
# Request fields that hold chat messages or multimodal score inputs.
_CONTENT_FIELDS = ("messages", "text_1", "text_2")


@dataclass(frozen=True)
class RequestStats:
    """What :func:`check_request` counted."""

    images: int = 0
    pixels: int = 0


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def content_parts(obj: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, part)`` for every content part (a dict with ``type``) in messages or in a
    score request's multimodal inputs, ``where`` naming its place (``messages[2].content[1]``)."""
    def walk(node: Any, where: str) -> Iterator[tuple[str, Any]]:
        if isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                yield from walk(item, f"{where}[{i}]")
        elif isinstance(node, dict) and "type" in node and "role" not in node:
            yield where, node
        elif node is not None and not isinstance(node, (str, bytes, int, float)):
            content = _get(node, "content")
            if isinstance(content, (list, tuple)):
                yield from walk(content, f"{where}.content")

    for field in _CONTENT_FIELDS:
        value = _get(obj, field)
        if value is not None:
            yield from walk(value, field)


def _url_of(part: Any) -> str:
    ref = _get(part, "image_url")
    url = ref if isinstance(ref, str) else _get(ref, "url")
    return url if isinstance(url, str) else ""


def decoded_size(data_url: str) -> int:
    """Bytes a base64 ``data:`` URL decodes to (computed from its length, without decoding)."""
    payload = data_url.partition(",")[2]
    if ";base64" not in data_url.partition(",")[0]:
        return len(payload)
    payload = payload.rstrip()
    return len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))


def image_dimensions(data_url: str) -> tuple[int, int]:
    """(width, height) an image ``data:`` URL declares, read from its header without decoding pixels.

    Raises:
        InvalidImage: not base64, or not an image PIL can identify (400).
    """
    head, _, payload = data_url.partition(",")
    try:
        raw = base64.b64decode(payload, validate=False) if ";base64" in head else payload.encode("latin-1")
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise InvalidImage(f"image data is not valid base64: {exc}") from None
    try:
        with warnings.catch_warnings():
            # PIL warns above ~89 Mpx and refuses above ~179 Mpx on open; the gateway's own bound
            # (below those) decides, so its warning is noise here.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as img:  # reads the header only; .load() would decode
                return img.size
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"image declares too many pixels: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InvalidImage(f"image data is not a readable image ({type(exc).__name__})") from None


def _check_image(where: str, url: str, limits: LimitsSpec) -> int:
    """Checks one image part; returns its pixel count."""
    if not url.startswith("data:"):
        shown = url[:60] + ("..." if len(url) > 60 else "")
        raise BadRequest(f"{where}: image_url must be a data: URL (remote URLs are never fetched), got {shown!r}")
    size = decoded_size(url)
    if size > limits.max_image_bytes:
        raise RequestTooLarge(f"{where}: image of {size} bytes exceeds the limit of {limits.max_image_bytes} bytes")
    width, height = image_dimensions(url)
    if width * height > limits.max_image_pixels:
        raise ImageTooLarge(f"{where}: image of {width}x{height} = {width * height} pixels exceeds the limit of "
                            f"{limits.max_image_pixels} pixels per image")
    return width * height


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _expect(where: str, value: Any, types: tuple[type, ...], *, nullable: bool = True) -> None:
    if (value is None and nullable) or (value is not None and isinstance(value, types)):
        return
    names = dict.fromkeys(_JSON_NAMES[t] for t in types)  # int and float are both "a number"
    raise BadRequest(f"{where}: must be {' or '.join(names)}, not {_json_kind(value)}")


def check_json_types(body: Any, fields: Collection[str] | None = None) -> None:
    """The JSON types of :data:`JSON_TYPES` (and of each message's and tool's fields vLLM reads) in
    a raw request body, before vLLM's request model parses it; ``fields``: only those the route's
    model has (the others it ignores), default all. Anything but a JSON object is left to that
    model (a parsed request was type-checked by it already).

    Raises:
        BadRequest: a field of another JSON type, naming it (``messages[0].tool_calls: must be an
            array, not a number``) (400).
    """
    if not isinstance(body, dict):
        return
    if fields is not None:
        body = {k: v for k, v in body.items() if k in fields}
    for field, types in JSON_TYPES.items():
        if field in body:
            _expect(field, body[field], types, nullable=field not in _NOT_NULL)
    for i, message in enumerate(body.get("messages") or ()):
        _expect(f"messages[{i}]", message, (dict,), nullable=False)
        for field, types in MESSAGE_JSON_TYPES.items():
            _expect(f"messages[{i}].{field}", message.get(field), types)
    for i, tool in enumerate(body.get("tools") or ()):  # vLLM reads tool["function"]["name"]
        _expect(f"tools[{i}]", tool, (dict,), nullable=False)
        _expect(f"tools[{i}].function", tool.get("function"), (dict,), nullable=False)
        _expect(f"tools[{i}].function.name", tool["function"].get("name"), (str,), nullable=False)


def _check_roles(messages: Any) -> None:
    if not isinstance(messages, (list, tuple)):
        return
    if not messages:
        raise BadRequest("messages: at least one message is required")
    for i, message in enumerate(messages):
        role = _get(message, "role")
        if not isinstance(role, str) or role not in OPENAI_ROLES:  # (a raw body's role may be any JSON)
            raise BadRequest(f"messages[{i}].role: {role!r} is not one of {sorted(OPENAI_ROLES)}")


MAX_TOKEN_ID = 2**31 - 1  # tokenizers and the engine hold token ids as 32-bit integers


def _check_token_ids(body: Any) -> None:
    """Token ids a client sends (``tokens`` to detokenize, a ``prompt`` given as ids) are whole numbers in
    ``[0, MAX_TOKEN_ID]``: a larger one overflows the tokenizer's integers inside the engine (a 500)."""
    for field in ("tokens", "prompt"):
        ids = _get(body, field)
        if not isinstance(ids, list):
            continue
        for i, value in enumerate(ids):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not (
                    0 <= value <= MAX_TOKEN_ID and float(value).is_integer()):
                raise BadRequest(f"{field}[{i}]: {value!r} is not a token id (a whole number from 0 to {MAX_TOKEN_ID})")


def check_request(body: Any, limits: LimitsSpec) -> RequestStats:
    """Every check of one engine request, before the engine sees it.

    Raises:
        BadRequest: a field of another JSON type than vLLM reads it as (in a raw body, see
            :func:`check_json_types`), a token id out of range, a role or part type OpenAI or this gateway does not take,
            no messages, a sampling field outside OpenAI's range, too many choices or images, a
            non-``data:`` image URL (400).
        InvalidImage: image data that is not an image (400).
        RequestTooLarge: an image over ``max_image_bytes`` (413).
        ImageTooLarge: an image over ``max_image_pixels``, or images over ``max_request_pixels`` in all (413).
    """
    check_json_types(body)
    _check_token_ids(body)
    _check_roles(_get(body, "messages"))
    for field, (low, high) in OPENAI_RANGES.items():
        value = _get(body, field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not low <= value <= high:
            raise BadRequest(f"{field}: {value} is outside [{low}, {high}]")
    for field in ("n", "best_of"):
        value = _get(body, field)
        if isinstance(value, int) and value > limits.max_choices:
            raise BadRequest(f"{field}: {value} choices in one request; the limit is {limits.max_choices}")
    images = pixels = 0
    for where, part in content_parts(body):
        kind = _get(part, "type")
        if not isinstance(kind, str) or kind not in SERVED_PART_TYPES:
            raise BadRequest(f"{where}: content part type {kind!r} is not served; "
                             f"use one of {sorted(SERVED_PART_TYPES)}")
        if kind != "image_url":
            continue
        images += 1
        if images > limits.max_images_per_request:
            raise BadRequest(f"more than {limits.max_images_per_request} images in one request (the limit)")
        pixels += _check_image(where, _url_of(part), limits)
        if pixels > limits.max_request_pixels:
            raise ImageTooLarge(f"images of more than {limits.max_request_pixels} pixels in all in one request "
                                f"(the limit per request; {where} passes it)")
    return RequestStats(images=images, pixels=pixels)
