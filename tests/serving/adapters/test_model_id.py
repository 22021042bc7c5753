"""ModelId: the one parse and format of ``base[:name[@version]]``, and no other code that splits or
builds one by hand (read from the source, so a new hand-written split fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serving.adapters import ModelId
from serving.errors import BadAdapterName

ROOT = Path(__file__).resolve().parents[3]
V = "0123456789ab"


@pytest.mark.parametrize("text, parts", [
    ("maze-tiny", ("maze-tiny", None, None)),
    ("maze-tiny:maze-grpo", ("maze-tiny", "maze-grpo", None)),
    (f"maze-tiny:maze-grpo@{V}", ("maze-tiny", "maze-grpo", V)),
    ("maze-tiny:", ("maze-tiny", "", None)),  # a colon with nothing after it still names an adapter (refused on check)
    ("b:a@", ("b", "a", "")),
    ("b:a:c@x@y", ("b", "a:c", "x@y")),  # first ':' then first '@': the rest is the adapter's to refuse
])
def test_parse_splits_at_the_first_colon_then_the_first_at_and_formats_back(text, parts):
    parsed = ModelId.parse(text)
    assert (parsed.base, parsed.name, parsed.version) == parts
    assert str(parsed) == text


def test_the_forms_a_caller_needs():
    pinned = ModelId.parse(f"maze-tiny:maze-grpo@{V}")
    assert pinned.folder == f"maze-grpo@{V}" and pinned.adapter_part == f"maze-grpo@{V}"
    assert str(pinned.unversioned) == "maze-tiny:maze-grpo" and pinned.is_adapter
    assert str(pinned.unversioned.at("f" * 12)) == f"maze-tiny:maze-grpo@{'f' * 12}"
    assert str(pinned.on("other")) == f"other:maze-grpo@{V}"
    assert str(ModelId.adapter(f"maze-grpo@{V}")) == f"maze-grpo@{V}"
    base = ModelId.parse("maze-tiny")
    assert not base.is_adapter and str(base.unversioned) == "maze-tiny" and str(base.at(V)) == "maze-tiny"
    with pytest.raises(ValueError, match="names no adapter version"):
        _ = ModelId.parse("maze-tiny:maze-grpo").folder


@pytest.mark.parametrize("bad, message", [
    ("agent@", "invalid adapter version in 'agent@'"),
    ("agent@123", "invalid adapter version in 'agent@123'"),
    ("a/b", "invalid adapter name 'a/b'"),
    ("agent\n", "control characters are not allowed"),
    (f"agent@{V}\n", "control characters are not allowed"),
    ("", "invalid adapter name ''"),
])
def test_checked_refuses_what_the_store_would_with_the_reason(bad, message):
    with pytest.raises(BadAdapterName, match=re.escape(message)):
        ModelId.adapter(bad)
    with pytest.raises(BadAdapterName, match=re.escape(message)):
        ModelId.parse(f"maze-tiny:{bad}").checked()
    assert ModelId.adapter(bad, check=False).adapter_part == bad  # unchecked: structure only


def test_plain_refuses_a_version():
    assert ModelId.plain("maze-grpo") == "maze-grpo"
    with pytest.raises(BadAdapterName, match="without a version"):
        ModelId.plain(f"maze-grpo@{V}")
    with pytest.raises(BadAdapterName, match="invalid adapter name"):
        ModelId.plain("../x")


# -- no model string split or built by hand outside adapters/ ---------------------------------------
PRODUCT = ("serving", "evaluation", "training", "agent", "maze_gateway")
HAND_SPLIT = re.compile(r"""\.(r?partition|r?split)\(\s*["']@["']""")
HAND_BUILT = re.compile(r"""f["'][^"'\n]*\}@\{""")  # an f-string joining a name and a version with '@'
# The scripted server answers as a gateway names the version that served a name (``model@version``), to
# test the runner's outcome reports without a gateway; agent imports no serving code, so it has no ModelId.
STANDS_IN_FOR_THE_GATEWAY = {"agent/tools/scripted_server.py"}


def _offenders(pattern: re.Pattern) -> list[str]:
    found = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.is_relative_to(ROOT / "serving" / "adapters") or \
                    str(path.relative_to(ROOT)) in STANDS_IN_FOR_THE_GATEWAY:
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    return found


def test_no_product_code_outside_adapters_splits_a_model_string_by_hand():
    assert _offenders(HAND_SPLIT) == []


def test_no_product_code_outside_adapters_builds_name_at_version_by_hand():
    assert _offenders(HAND_BUILT) == []


def test_the_scans_find_what_they_look_for():
    assert HAND_SPLIT.search('name, _, version = lora_id.partition("@")')
    assert HAND_SPLIT.search("x.split('@', 1)") and HAND_SPLIT.search('x.rpartition("@")')
    assert HAND_BUILT.search('model = f"{base}:{name}@{version}"')
    assert not HAND_SPLIT.search('host.partition(":")') and not HAND_BUILT.search('f"{HOST}:{port}"')
