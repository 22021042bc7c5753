"""A keyed stream is asked for its usage in every chunk and at its end (serving.auth.usage.request_stream_usage),
in the installed vLLM's own request type, whichever vLLM that is (its StreamOptions moved between releases)."""

from __future__ import annotations

import pytest

from serving.auth.usage import request_stream_usage


def _chat(**fields):
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], model="m", **fields)


@pytest.mark.parametrize("asked, hidden", [
    (None, (True, True)),  # nothing asked: the client sees no usage at all
    ({"include_usage": True}, (True, False)),  # the last chunk's usage asked: every chunk's is hidden
])
def test_a_stream_is_asked_for_its_usage_in_the_engines_own_type(asked, hidden):
    body = _chat(stream=True, stream_options=asked)
    assert request_stream_usage(body) == hidden
    assert (body.stream_options.include_usage, body.stream_options.continuous_usage_stats) == (True, True)
    again = type(body).model_validate(body.model_dump())  # the engine's request model takes it as its own
    assert again.stream_options.continuous_usage_stats


def test_a_stream_that_asks_for_all_usage_and_an_answer_that_is_no_stream_are_left_alone():
    both = {"include_usage": True, "continuous_usage_stats": True}
    asked = _chat(stream=True, stream_options=both)
    assert request_stream_usage(asked) == (False, False)
    plain = _chat(stream=False)
    assert request_stream_usage(plain) is None and plain.stream_options is None
