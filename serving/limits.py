"""Request checks the gateway runs before anything reaches an engine (pure functions).

Images must arrive inline as ``data:`` URLs: the gateway never fetches remote URLs (that would let
any caller make the cluster download arbitrary content), so ``http(s)://`` and ``file:`` URLs are
a 400. Image counts and decoded sizes are bounded by :class:`~serving.config.LimitsSpec`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from serving.config import LimitsSpec
from serving.errors import BadRequest, RequestTooLarge

# Content-part types that carry a URL the engine would otherwise fetch.
_MEDIA_PARTS = {"image_url": "image_url", "video_url": "video_url", "audio_url": "audio_url"}


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def media_urls(messages: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """Yield ``(part_type, url)`` for every media part of OpenAI chat messages."""
    for message in messages or ():
        content = _get(message, "content")
        if not isinstance(content, list):
            continue
        for part in content:
            kind = _get(part, "type")
            if kind not in _MEDIA_PARTS:
                continue
            ref = _get(part, _MEDIA_PARTS[kind])
            url = ref if isinstance(ref, str) else _get(ref, "url")
            yield kind, url if isinstance(url, str) else ""


def decoded_size(data_url: str) -> int:
    """Bytes a base64 ``data:`` URL decodes to (computed from its length, without decoding)."""
    payload = data_url.partition(",")[2]
    if ";base64" not in data_url.partition(",")[0]:
        return len(payload)
    payload = payload.rstrip()
    return len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))


def check_messages(messages: Iterable[Any], limits: LimitsSpec) -> int:
    """Validate media parts; returns the number of images.

    Raises:
        BadRequest: a non-``data:`` URL, or more images than allowed (400).
        RequestTooLarge: an image larger than ``limits.max_image_bytes`` once decoded (413).
    """
    images = 0
    for kind, url in media_urls(messages):
        if not url.startswith("data:"):
            shown = url[:60] + ("..." if len(url) > 60 else "")
            raise BadRequest(f"{kind} must be a data: URL (remote URLs are never fetched), got {shown!r}")
        size = decoded_size(url)
        if size > limits.max_image_bytes:
            raise RequestTooLarge(f"{kind} of {size} bytes exceeds the limit of {limits.max_image_bytes} bytes")
        images += kind == "image_url"
    if images > limits.max_images_per_request:
        raise BadRequest(f"{images} images in one request; the limit is {limits.max_images_per_request}")
    return images
