"""Prompt protocol: message shapes, parsers, history policies."""

from __future__ import annotations

import pytest

from agent.maze import decode_data_url, generate_from_seed, render_frame
from agent.protocol import KEYWORD, TUPLE, HistoryPolicy, get_protocol, protocol_corpus, user_message


@pytest.mark.parametrize(
    "reply, action",
    [
        ("('move', 0)", ("move", 0)),
        ("('stop', 'stop')", ("stop", "stop")),
        ("I'll go (move, 2) now", ("move", 2)),
        ("(stop, stop)", ("stop", "stop")),
        ("first (1, 2) then ('move', 3) and ('move', 1)", ("move", 3)),
        ("(('move', 1))", ("move", 1)),
        ("('jump', 9)", ("jump", 9)),  # parsed; the env rejects the name
        ("```python\n('move', 1)\n```", ("move", 1)),
        ("hello", None),
        ("(True, 1)", None),
        ("('move', 1", None),
        ("", None),
        ("(" * 5000, None),
    ],
)
def test_tuple_parser(reply, action):
    assert TUPLE.parse(reply) == action


@pytest.mark.parametrize(
    "reply, action",
    [
        ("<action>right</action>", ("move", 0)),
        ("<action>up</action> or rather <action> DOWN </action>", ("move", 3)),
        ("<action>stop</action>", ("stop", "stop")),
        ("<action>north</action>", None),
        ("right", None),
    ],
)
def test_keyword_parser(reply, action):
    assert KEYWORD.parse(reply) == action


def test_initial_text_order_and_content():
    text = TUPLE.initial_text(7, 7)
    keys = ["7x7 maze", "gray", "white", "blue circle", "red square", "('move', direction)", "0=right, 1=up, 2=left, 3=down",
            "('stop', 'stop')", "reach the red square and then stop", "plain Python tuple", "backticks"]
    positions = [text.index(k) for k in keys]
    assert positions == sorted(positions)
    assert "<action>right</action>" in KEYWORD.initial_text(9, 9) and "9x9" in KEYWORD.initial_text(9, 9)


def test_user_message_shape_text_then_png():
    m = generate_from_seed(7, 7, 0)
    frame = render_frame(m.grid, m.start, m.goal)
    msg = user_message("hi", frame)
    assert msg["role"] == "user"
    assert [p["type"] for p in msg["content"]] == ["text", "image_url"]
    url = msg["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert (decode_data_url(url) == frame).all()


def test_protocol_ids_and_lookup():
    assert TUPLE.id == "tuple/v1" and get_protocol("keyword/v1") is KEYWORD
    with pytest.raises(ValueError, match="unknown protocol"):
        get_protocol("tuple/v9")
    assert TUPLE.format_action(("move", 3)) == "('move', 3)" and KEYWORD.format_action(("stop", "stop")) == "<action>stop</action>"


def conversation(turns: int) -> list[dict]:
    conv = [user_message("RULES", None)]
    for i in range(1, turns):
        conv += [{"role": "assistant", "content": f"a{i}"}, user_message(f"f{i}", None)]
    return conv


def test_history_full_and_window():
    conv = conversation(5)  # U1 A1 U2 A2 U3 A3 U4 A4 U5
    assert HistoryPolicy.parse("full").select(conv) == conv
    w = HistoryPolicy.parse("window:2").select(conv)
    assert [m["role"] for m in w] == ["user", "assistant", "user", "assistant", "user"]
    assert w[0]["content"][0]["text"].startswith("RULES") and w[0]["content"][1]["text"] == "f2"
    assert w[-1]["content"][0]["text"] == "f4"
    assert HistoryPolicy.parse("window:0").select(conv)[0]["content"][1]["text"] == "f4"
    assert HistoryPolicy.parse("window:9").select(conv) == conv
    assert conv[4]["content"][0]["text"] == "f2"  # the conversation itself is untouched
    assert str(HistoryPolicy.parse("last:3")) == "window:3"
    with pytest.raises(ValueError, match="history policy"):
        HistoryPolicy.parse("recent")


def test_corpus_covers_all_texts():
    corpus = protocol_corpus()
    assert any("11x11" in t for t in corpus) and "('stop', 'stop')" in corpus and "<action>left</action>" in corpus
