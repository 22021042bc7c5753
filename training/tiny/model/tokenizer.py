"""The tiny model's offline tokenizer: a Qwen-style byte-level BPE trained on the maze protocol's own
texts (so prompts are short), with Qwen's special tokens and a trimmed Qwen3-VL chat template.

Nothing is downloaded; the same corpus gives the same tokenizer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)

# Qwen's special tokens, in the order Qwen2/3 tokenizers list them (ids follow the learned vocab).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen3-VL's chat template, trimmed to what the maze agent uses (no tools, no thinking), and
# accepting both OpenAI content parts ({"type": "image_url", ...}, which vLLM and the processor
# pass through as {"type": "image"}) and plain string contents. No default system message: the
# maze protocol sends none, and Qwen3-VL adds none.
CHAT_TEMPLATE = (
    "{%- set image_count = namespace(value=0) -%}"
    "{%- set video_count = namespace(value=0) -%}"
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for content in message['content'] -%}"
    "{%- if content['type'] == 'image' or content['type'] == 'image_url' or 'image' in content "
    "or 'image_url' in content -%}"
    "{%- set image_count.value = image_count.value + 1 -%}"
    "{%- if add_vision_id -%}Picture {{ image_count.value }}: {% endif -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif content['type'] == 'video' or 'video' in content -%}"
    "{%- set video_count.value = video_count.value + 1 -%}"
    "{%- if add_vision_id -%}Video {{ video_count.value }}: {% endif -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in content -%}"
    "{{ content['text'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
# Jinja's whitespace control above strips the "\n" after role names and <|im_end|>; Qwen's
# template keeps them, so they are put back explicitly.
CHAT_TEMPLATE = (
    CHAT_TEMPLATE.replace("<|im_start|>{{ message['role'] }}\n", "<|im_start|>{{ message['role'] + '\\n' }}")
    .replace("<|im_end|>\n", "{{ '<|im_end|>\\n' }}")
    .replace("<|im_start|>assistant\n", "{{ '<|im_start|>assistant\\n' }}")
)

# Qwen2/3's pre-tokenisation regex (splits contractions, letters, single digits, punctuation).
_QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def default_corpus(source: str = "protocol") -> list[str]:
    """Texts the tokenizer is trained on: the maze protocol's own texts.

    ``source="protocol"`` takes them from ``agent.protocol.protocol_corpus`` (the single source
    of the wording) and fails if the agent package cannot be imported: a silent fallback would
    make the tokenizer, and so the model, depend on the environment. ``source="builtin"`` uses
    a frozen snapshot of that wording (identical today; it will drift if the protocol changes),
    for environments without the agent package.
    """
    if source == "protocol":
        try:
            from agent.protocol import protocol_corpus
        except ImportError as exc:
            raise RuntimeError(
                f"agent.protocol is not importable ({exc}); install the project or use --corpus builtin"
            ) from exc
        texts = list(protocol_corpus())
    elif source == "builtin":
        texts = _fallback_corpus()
    else:
        raise ValueError(f"unknown corpus source {source!r}")
    # Always include both reply styles and the chat roles, whatever the protocol module says.
    texts += [repr(("move", d)) for d in range(4)] + [repr(("stop", "stop"))]
    texts += [f"<action>{w}</action>" for w in ("right", "up", "left", "down", "stop")]
    texts += ["system", "user", "assistant", "\n", " "]
    logger.info("tokenizer corpus: %d texts from %s", len(texts), source)
    return texts


def _fallback_corpus(sizes: Sequence[int] = (7, 9, 11)) -> list[str]:
    """Snapshot of ``agent.protocol.protocol_corpus()`` (tuple/v1 and keyword/v1), same order."""
    head = (
        "You are navigating a {s}x{s} maze.\n"
        "In the image, walls are gray, open paths are white, you are the blue circle and the goal is the red square.\n"
    )
    success = "You succeed when you reach the red square and then stop.\n"
    failed = "Your reply could not be parsed as an action. "
    tuple_actions = (
        "Actions:\n- ('move', direction): move one cell, where direction is 0=right, 1=up, 2=left, 3=down.\n"
        "- ('stop', 'stop'): end the episode.\n"
    )
    tuple_reply = (
        "Reply with exactly one action as a plain Python tuple, without backticks or code blocks, "
        "for example ('move', 0) or ('stop', 'stop')."
    )
    keyword_actions = (
        "Actions:\n- <action>right</action>, <action>up</action>, <action>left</action>, <action>down</action>: "
        "move one cell in that direction.\n- <action>stop</action>: end the episode.\n"
    )
    keyword_reply = "Reply with exactly one action tag, for example <action>right</action> or <action>stop</action>."
    texts: list[str] = []
    texts += [head.format(s=s) + tuple_actions + success + tuple_reply for s in sizes]
    texts += [failed + tuple_reply] + [repr(("move", d)) for d in range(4)] + [repr(("stop", "stop"))]
    texts += [head.format(s=s) + keyword_actions + success + keyword_reply for s in sizes]
    texts += [failed + keyword_reply]
    texts += [f"<action>{w}</action>" for w in ("right", "up", "left", "down", "stop")]
    texts += [
        "Cannot parse the action, action invalid.",
        "Action format invalid, it must be a tuple (name, payload).",
        "Action name not recognised.",
        "Action not in the valid action space, nothing executed.",
        "Cannot move into a wall, the agent did not move.",
        "Action executed successfully.",
    ]
    return texts


def build_tokenizer(corpus: Sequence[str], vocab_size: int):
    """A Qwen-style byte-level BPE trained on ``corpus``, as a PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    # Same pipeline as Qwen2/3: regex split, then byte-level without its own regex, so any text
    # (feedback wording may change) still encodes: all 256 bytes are in the vocabulary.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],  # added after training so they get ids after the learned vocab
    )
    # Repeat the corpus a little so rare protocol strings still get merges; order is fixed.
    tok.train_from_iterator(list(corpus) * 4, trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        padding_side="left",  # batched generation pads on the left
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok
