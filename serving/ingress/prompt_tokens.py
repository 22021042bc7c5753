"""A request's prompt tokens, counted by the engine's own tokenizer (and chat template).

The key gate charges a request what its response says it used. A request the client leaves before
its response starts (a JSON answer it stopped waiting for, a stream before its first chunk) has no
response to say it: the engine aborts it and reports nothing. The ingress then asks the engine's
``tokenize`` method, with the request's own messages, template and tools (or prompt), how many
tokens its prompt is, in a task of its own (``serving.auth.caller.Caller.prompt_count``), and the gate
charges those when the request has ended. Asked only on that path: a request that gets its answer
costs no extra call.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

COUNT_TIMEOUT_S = 10.0  # a tokenize call takes milliseconds; a stuck one must not hold the request's end


def _tokenize_requests(body) -> tuple[list, int]:
    """The tokenize requests that count ``body``'s prompt, and the tokens already known without one
    (a completion prompt given as token ids)."""
    from serving.compat import TokenizeChatRequest, TokenizeCompletionRequest, sanitize_chat_request

    if getattr(body, "messages", None) is not None:
        # Every field the two share (template, its kwargs, tools, generation prompt, special tokens):
        # the prompt is rendered as the chat request's was.
        shared = set(TokenizeChatRequest.model_fields) & set(type(body).model_fields) - {"model"}
        request = TokenizeChatRequest.model_validate({f: getattr(body, f) for f in shared})
        return [sanitize_chat_request(request)], 0  # Ray's fix: content parts a Ray call can send
    prompt = getattr(body, "prompt", None)
    prompts = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt or [])
    special = getattr(body, "add_special_tokens", True)
    texts = [p for p in prompts if isinstance(p, str)]
    known = sum(len(p) for p in prompts if not isinstance(p, str))  # token ids: their count is their length
    return [TokenizeCompletionRequest(prompt=t, add_special_tokens=special) for t in texts], known


async def _count(handle, request) -> int:
    async for answer in handle.tokenize.remote(request, None):
        count = getattr(answer, "count", None)
        if isinstance(count, int):
            return count
        raise RuntimeError(f"the engine did not tokenize the prompt: {getattr(answer, 'error', answer)}")
    raise RuntimeError("the engine's tokenize call answered nothing")


async def count_prompt_tokens(handle, body, timeout_s: float = COUNT_TIMEOUT_S) -> int | None:
    """The prompt tokens of a chat or completion request ``body`` by the engine behind ``handle`` (a
    streaming handle of the base model), None when they cannot be counted (the engine failed or took
    longer than ``timeout_s``): never raises, it runs while a request is being torn down."""
    try:
        requests, known = _tokenize_requests(body)
        counts = await asyncio.wait_for(asyncio.gather(*(_count(handle, r) for r in requests)), timeout_s)
    except Exception as exc:  # noqa: BLE001 - an uncounted prompt is logged, never the request's error
        log.warning("could not count the prompt tokens of an abandoned request: %s: %s", type(exc).__name__, exc)
        return None
    return known + sum(counts)


__all__ = ["COUNT_TIMEOUT_S", "count_prompt_tokens"]
