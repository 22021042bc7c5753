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
from serving.ingress.request_checks import check_request, decoded_size, image_dimensions
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
    t0 = time.perf_counter()
    with pytest.raises(ImageTooLarge, match="12000x12000 = 144000000 pixels") as info:
        check_messages(_msg(bomb), limits)
    assert time.perf_counter() - t0 < 0.5  # decoding it would take seconds and ~432 MB
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


def test_roles_openai_accepts():
    messages = [{"role": r, "content": "x"} for r in ("system", "developer", "user", "assistant", "tool", "function")]
    assert check_request({"messages": messages}, ServingConfig.shipped("embedded").limits).images == 0
