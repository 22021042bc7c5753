"""The docs' figures check: every measured figure of README.md and docs/*.md tied to its results file.

Every measured figure in the prose, tables and fenced outputs of the pages is registered in
``docs/figures.toml``: per page, per results file (``benchmarks/results/NAME.json``, or a repository
path such as ``models/scores_gateway.json``), a phrase of the page with the figure in braces and the
JSON path of the field that holds it::

    ["docs/benchmarks.md".figures."load_checks.json"]
    "A cold load takes {32.6} ms" = "summary.replica_load_s_median *1000"  # s as ms; *100: % of a fraction
    "{14.7}% (95% interval" = "summary.checks_share_median *100"
    ["docs/benchmarks.md".figures."auth_overhead.json"]
    "was {0.23}, {0.20}" = ["rounds[0].p50_delta_ms half_up", "rounds[1].p50_delta_ms"]  # half_even unless so

The field, times the scale, rounded to the places the page shows, must equal the figure, and its
sign must be the page's: a figure shown with ``+`` or ``-`` is compared signed; one shown bare is
read through the direction word beside it (``28.9 ms sooner``, ``11 mazes more``, ``up 3%``: sooner,
earlier, faster, less, fewer, lower, down say the field is negative; later, slower, more, longer,
higher, up that it is positive), and a negative field shown bare with no such word is
a lost sign. The words read a field as a difference, this minus that (a time: faster is negative);
``*-1`` turns a field the other way round. Ratios (``x1.08``, ``12x``) have no sign.

Fenced blocks are code, but what a block shows a command printing is checked like prose: every line
of a block with no language (``text``, ``console`` or ``output`` too) but a ``$ `` command, and the
comments of ``bash``, ``sh``, ``shell`` and ``python`` blocks (``maze-eval ...  # solved 58/64``).

A page's ``not_figures`` lists the phrases whose numbers are not measurements (a config default, a
count of things, the 64-maze set), each with its reason; its ``tables`` names tables a script prints
from a results file (``"fault_matrix.json" = "benchmarks/fault_matrix.py:markdown_table"``), compared
whole. Its ``claims`` tie what the prose says of a measurement's rounds or runs to the field::

    ["docs/benchmarks.md".claims."server_timing.json"]
    "later, in every round" = ["all_positive layouts.standard.summary.X.rounds", "..."]

with ``all_positive`` / ``all_negative`` / ``mixed_sign`` LIST, and ``within`` / ``outside`` /
``below`` / ``above`` VALUE RANGE (VALUE a number or an interval, RANGE a two-item list). Every
phrase of that kind on a page (``in every round``, ``in sign``, ``changes sign``, ``within the ...
spread``, ``below that spread``) must be a registered claim, as every figure must be registered.

Numbers that are not figures by rule (``rule``): code, link targets, URLs, headings, list numbering,
parts of names (``p50``, ``Qwen3``, ``rank-64``, ``c=8``), counts in compound words (``2-core``),
ranges written ``0..63``, what a count is out of (the 64 of ``26/64``), versions and addresses,
dates and times, HTTP statuses.

Why one registry file rather than a comment beside each figure: the pages stay plain markdown that
reads the same in an editor as rendered, a figure and its field sit on one line of the registry,
and the entries of one results file are together, so re-measuring a benchmark means re-reading one
block. Phrases rather than positions: an edit elsewhere on the page moves nothing, and a changed
figure no longer matches its phrase, so it fails as unregistered. Pure and fast: reads files only.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
REGISTRY = DOCS / "figures.toml"

# A fence may be indented up to 3 spaces (CommonMark), as one inside a list item is.
FENCE = re.compile(r"^ {0,3}```(?P<info>[^\n]*)\n(?P<body>.*?)^ {0,3}```", re.S | re.M)
# Regions of the prose whose numbers are never figures, blanked in this order (a fence first: its
# backticks are not code spans). CommonMark code spans may cross a line; ``double`` ones may hold
# single backticks.
CODE_SPAN = re.compile(r"``(?:[^`]|`(?!`))+?``|`[^`]+?`")
URL = re.compile(r"https?://\S+|wss?://\S+")
PROSE_MASKS = (re.compile(r"<!--.*?-->", re.S), CODE_SPAN, re.compile(r"\]\([^)]*\)"), URL,
               re.compile(r"^#{1,6} .*$", re.M))
# Fences whose every line is output (a "$ " line is a command: its comment only), and fences whose
# comments are what the page says a command prints or does.
OUTPUT_FENCES = {"", "text", "console", "output"}
COMMENTED_FENCES = {"bash", "sh", "shell", "python"}
COMMENT = re.compile(r"(?:^|(?<=\s))#(?P<text>[^\n]*)", re.M)
NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)*(?:[eE][+-]?\d+)?")
STATUSES = {"200", "201", "204", "400", "401", "403", "404", "408", "409", "413", "422", "429", "500", "502",
            "503", "504"}
# A letter just before a number, or through one or two marks: a name, a label or a version pin.
GLUED = re.compile(r"[A-Za-z_][-=:(#/@<>!~]{0,2}\Z")
VERSIONED = re.compile(r"(?:Python|Ray|LLM|vLLM|SkyRL|Debian|Ubuntu) \Z")
DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[+-]\d\d:\d\d|Z)?)?|\d\d:\d\d(?::\d\d)?")

# Direction words: the sign they say the field has (a difference, this minus that).
AFTER_WORDS = {**dict.fromkeys(("sooner", "earlier", "faster", "quicker", "less", "fewer", "shorter", "smaller",
                                "lower", "down"), -1),
               **dict.fromkeys(("later", "slower", "more", "longer", "larger", "higher", "up"), 1)}
BEFORE_WORDS = {**dict.fromkeys(("down", "fell", "falls", "dropped", "drops", "shrank", "shrinks"), -1),
                **dict.fromkeys(("up", "rose", "rises", "grew", "grows"), 1)}
# What the prose says of a measurement's rounds or runs: each must be a registered claim.
CLAIM_WORDS = re.compile(r"\bin every round\b|\bin sign\b|\bchanges? sign\b|"
                         r"\b(?:within|outside|below|above) (?:a|the|that|its|their) [\w' ]{0,24}?spread\b", re.I)


@dataclass(frozen=True)
class Token:
    """A number of a page: where it is, as shown, and why it is not a figure (None: it is one)."""

    start: int
    end: int
    shown: str
    signed: bool
    rule: str | None

    @property
    def value(self) -> Decimal:
        return Decimal(self.shown.lstrip("+").replace(",", "").replace("−", "-"))

    @property
    def places(self) -> int:
        return max(0, -self.value.as_tuple().exponent)


def output_spans(text: str) -> list[tuple[int, int]]:
    """The parts of the page's fenced blocks that show what a command prints (see the module's doc)."""
    spans = []
    for fence in FENCE.finditer(text):
        info, at, body = fence.group("info").strip().lower(), fence.start("body"), fence.group("body")
        if info in OUTPUT_FENCES:
            for line in re.finditer(r"[^\n]+", body):
                if not line.group(0).startswith("$ "):
                    spans.append((at + line.start(), at + line.end()))
        if info in COMMENTED_FENCES or info in OUTPUT_FENCES:
            # a command's comment; in an output block only a "$ " line's (the rest is output already)
            for m in COMMENT.finditer(body):
                line_start = body.rfind("\n", 0, m.start()) + 1
                if info in COMMENTED_FENCES or body.startswith("$ ", line_start):
                    spans.append((at + m.start("text"), at + m.end("text")))
    return spans


def masked(text: str, extra: list[tuple[int, int]] = ()) -> str:
    """``text`` with its code, comments, link targets, URLs, headings and ``extra`` spans blanked
    (same length, newlines kept), so offsets stay those of the page; a fenced block's output
    (:func:`output_spans`) stays, its URLs and code spans blanked."""
    chars = list(text)

    def blank(a: int, b: int) -> None:
        chars[a:b] = [c if c == "\n" else " " for c in chars[a:b]]

    for a, b in extra:
        blank(a, b)
    for m in FENCE.finditer(text):
        blank(*m.span())
    for mask in PROSE_MASKS:
        for m in mask.finditer("".join(chars)):
            blank(*m.span())
    for a, b in output_spans(text):
        chars[a:b] = text[a:b]
        for mask in (URL, CODE_SPAN):
            for m in mask.finditer(text[a:b]):
                blank(a + m.start(), a + m.end())
    return "".join(chars)


def rule(text: str, start: int, end: int, token: str) -> str | None:
    """Why the number at ``text[start:end]`` is not a figure, or None (``text`` is masked)."""
    before, after = text[max(0, start - 2):start].rjust(2), text[end:end + 2].ljust(2)
    name = lambda c: c.isalpha() or c == "_"  # noqa: E731
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start:line_end if line_end >= 0 else len(text)]
    if any(line_start + m.start() <= start and end <= line_start + m.end() for m in DATE_TIME.finditer(line)):
        return "a date or a time"
    if token.count(".") > 1:
        return "a version or an address"
    if ".." in (before, after):
        return "a range (0..63)"
    if before[1] == "/" and before[0].isdigit():
        return "the size a count is out of (26/64)"
    ratio = before[1] == "x" and not before[0].isalnum()  # x1.08
    if not ratio and GLUED.search(text[max(0, start - 3):start]):
        return "part of a name (p50, Qwen3, rank-64, c=8, pass@1, openai>=3.4)"
    if name(after[0]) and not (after[0] == "x" and not after[1].isalnum()):  # 12x is a ratio
        return "part of a name (2D, 8B, 224x224)"
    if after[0] == "-" and after[1].isalpha():
        return "a count in a compound word (2-core, 64-maze)"
    if "." in token and not token.startswith("0") and VERSIONED.search(text[max(0, start - 8):start]):
        return "a version"
    if token in STATUSES:
        return "an HTTP status"
    if not text[line_start:start].strip() and after == ". ":
        return "list numbering"
    return None


def tokens(text: str, extra: list[tuple[int, int]] = ()) -> list[Token]:
    """Every number outside the masked regions, with its rule."""
    prose = masked(text, extra)
    out = []
    for m in NUMBER.finditer(prose):
        s, e, shown = m.start(), m.end(), m.group(0)
        if s and (prose[s - 1].isdigit() or prose[s - 1] in ",."):
            continue  # the tail of a longer run (1,2: not thousands)
        sign = prose[s - 1] if s and prose[s - 1] in "+-−" else ""
        signed = bool(sign) and (s < 2 or prose[s - 2] in " \n(|[")
        out.append(Token(s - signed, e, (sign if signed else "") + shown, signed, rule(prose, s, e, shown)))
    return out


# --- the registry ------------------------------------------------------------------------------

def load_registry() -> dict:
    return tomllib.loads(REGISTRY.read_text())


def phrase_pattern(phrase: str) -> re.Pattern:
    """A phrase as a pattern: whitespace as any run of it (lines wrap), braces as groups, and no
    digit glued to either end (``{6}`` does not match inside 16)."""
    def literal(text: str) -> str:
        return r"\s+".join(re.escape(word) for word in re.split(r"\s+", text))

    parts = re.split(r"(\{[^}]*\})", phrase)
    body = "".join(f"({re.escape(p[1:-1])})" if p.startswith("{") else literal(p) for p in parts)
    head = r"(?<![\d.,])" if phrase[:1].isdigit() or phrase[:1] in "{+-" else ""
    tail = r"(?!\d|[.,]\d)" if phrase[-1:].isdigit() or phrase[-1:] == "}" else ""
    return re.compile(head + body + tail)


PATH_STEP = re.compile(r'\.?([A-Za-z_][\w-]*)|\[(\d+)\]|\["([^"]+)"\]')
SPEC = re.compile(r"^(?P<path>\S+)(?:\s+\*(?P<scale>-?\d+))?(?:\s+(?P<rounding>half_up|half_even))?$")


def field(doc, path: str):
    """The value at ``path`` (``a.b[0]["c:d"]``) of a JSON document."""
    pos, value = 0, doc
    while pos < len(path):
        m = PATH_STEP.match(path, pos)
        if not m:
            raise KeyError(f"bad path {path!r} at {path[pos:]!r}")
        key = m.group(1) or m.group(3)
        value = value[int(m.group(2))] if m.group(2) else value[key]
        pos = m.end()
    return value


def load_json(name: str):
    path = ROOT / name if "/" in name else RESULTS / name
    return json.loads(path.read_text(), parse_float=Decimal, parse_int=Decimal)


def direction(text: str, token: Token) -> tuple[str, int] | None:
    """The direction word beside ``token`` and the sign it says, or None: one of the two words after
    it in its clause (its unit first: ``28.9 ms sooner``), or the word before it, past a ``by``
    (``up 3%``, ``rose by 11``)."""
    clause = re.split(r"[,;:()|]|\.(?:\s|$)", text[token.end:token.end + 60], maxsplit=1)[0]
    for word in re.findall(r"[A-Za-z]+", clause)[:2]:
        if word.lower() in AFTER_WORDS:
            return word.lower(), AFTER_WORDS[word.lower()]
    before = re.findall(r"[\w']+", text[max(0, token.start - 40):token.start])[-2:]
    if before and before[-1].lower() == "by":
        before = before[:-1]
    if before and before[-1].lower() in BEFORE_WORDS:
        return before[-1].lower(), BEFORE_WORDS[before[-1].lower()]
    return None


def is_ratio(text: str, token: Token) -> bool:
    """``x1.08`` or ``12x``: a ratio, which has no sign."""
    return text[token.start - 1:token.start] == "x" or text[token.end:token.end + 1] == "x"


def shows(token: Token, doc, spec: str, text: str = "") -> str | None:
    """Why ``token`` (of the page ``text``) is not what ``spec`` (``path [*scale] [rounding]``) of
    ``doc`` holds, in size or in sign, or None."""
    m = SPEC.match(spec)
    if not m:
        return f"bad field spec {spec!r}"
    try:
        value = field(doc, m.group("path"))
    except (KeyError, IndexError, TypeError) as exc:
        return f"no field {m.group('path')!r} ({exc})"
    if not isinstance(value, Decimal):
        return f"{m.group('path')!r} is {value!r}, not a number"
    value *= Decimal(m.group("scale") or 1)
    rounding = ROUND_HALF_UP if m.group("rounding") == "half_up" else ROUND_HALF_EVEN
    want = (value if token.signed else abs(value)).quantize(Decimal(1).scaleb(-token.places), rounding=rounding)
    if want != token.value:
        return f"{spec} holds {value} (shown: {want})"
    if token.signed or not want or is_ratio(text, token):
        return None
    said = direction(text, token)
    if said is None and value < 0:
        return f"{spec} holds {value}: a negative figure shown with neither its sign nor a direction word"
    if said is not None and (value > 0) != (said[1] > 0):
        return f"the page says {token.shown} {said[0]!r}, but {spec} holds {value}"
    return None


# --- claims ------------------------------------------------------------------------------------

def numbers(value) -> list[Decimal]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, Decimal) for v in values):
        raise TypeError(f"{value!r} is not a number or a list of numbers")
    return values


def holds(doc, spec: str) -> str | None:
    """Why the claim ``spec`` (``PREDICATE path [path]``) does not hold of ``doc``, or None."""
    predicate, *paths = spec.split()
    try:
        args = [numbers(field(doc, p)) for p in paths]
    except (KeyError, IndexError, TypeError) as exc:
        return f"{spec}: {exc}"
    signs = {v > 0 for v in args[0] if v}
    if predicate in ("all_positive", "all_negative", "mixed_sign") and len(args) == 1:
        ok = {"all_positive": signs == {True} and all(args[0]), "all_negative": signs == {False} and all(args[0]),
              "mixed_sign": signs == {True, False}}[predicate]
    elif predicate in ("within", "outside", "below", "above") and len(args) == 2 and len(args[1]) == 2:
        (low, high), vals = sorted(args[1]), args[0]
        ok = {"within": low <= min(vals) and max(vals) <= high, "below": max(vals) < low, "above": min(vals) > high,
              "outside": max(vals) < low or min(vals) > high}[predicate]
    else:
        return f"bad claim {spec!r}"
    return None if ok else f"{spec} does not hold: {', '.join(str(a) for a in args)}"


def claim_problems(page: str, text: str, entry: dict) -> list[str]:
    """Unregistered claims of the page, registered ones it does not make, and ones that do not hold."""
    problems, covered = [], []
    for name, claims in entry.get("claims", {}).items():
        doc = load_json(name)
        for phrase, specs in claims.items():
            spans = [m.span() for m in phrase_pattern(phrase).finditer(text)]
            if not spans:
                problems.append(f"{page}: claim {phrase!r} ({name}) is not on the page")
            covered += spans
            for spec in [specs] if isinstance(specs, str) else specs:
                if why := holds(doc, spec):
                    problems.append(f"{page}: claim {phrase!r}: {why}")
    prose = masked(text)
    for m in CLAIM_WORDS.finditer(prose):
        if not any(a <= m.start() and m.end() <= b for a, b in covered):
            context = " ".join(text[max(0, m.start() - 60):m.end() + 20].split())
            problems.append(f"{page}: unregistered claim {m.group(0)!r} at {line_of(text, m.start())}: ...{context}...")
    return problems


# --- a page ------------------------------------------------------------------------------------

def script_function(spec: str):
    """``benchmarks/x.py:name``: that function of the script, loaded from its file."""
    path, _, name = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location(f"doc_tables_{Path(path).stem}", ROOT / path)
    module = importlib.util.module_from_spec(module_spec)
    # registered before it runs, as an import would: a dataclass looks its module up in sys.modules
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def generated_tables(page: str, text: str, entry: dict) -> tuple[list[tuple[int, int]], list[str]]:
    """The spans of the page's generated tables, and the problems: a table the script would print
    otherwise from its results file."""
    spans, problems = [], []
    for name, func in entry.get("tables", {}).items():
        table = script_function(func)(json.loads((RESULTS / name).read_text()))
        at = text.find(table)
        if at < 0:
            problems.append(f"{page}: the table of {name} is not what {func} prints from it")
        else:
            spans.append((at, at + len(table)))
    return spans, problems


def check_page(page: str, text: str, registry: dict) -> list[str]:
    """Problems of one page: unregistered figures, figures their field does not hold (in size or in
    sign), stale entries, claims unregistered or untrue."""
    entry = registry.get(page, {})
    spans, problems = generated_tables(page, text, entry)
    found = {t.start: t for t in tokens(text, spans)}
    covered: dict[int, str] = {}

    def cover(start: int, what: str) -> None:
        if start in covered and covered[start] != what:
            problems.append(f"{page}: {found[start].shown!r} at {line_of(text, start)} is both {covered[start]} "
                            f"and {what}")
        covered[start] = what

    for phrase, reason in entry.get("not_figures", {}).items():
        hits = [t for m in phrase_pattern(phrase).finditer(text) for t in found.values()
                if m.start() <= t.start < m.end() and t.rule is None]
        if not hits:
            problems.append(f"{page}: not_figures {phrase!r} matches no number of the page")
        for t in hits:
            cover(t.start, f"not a figure ({reason})")
    for name, figures in entry.get("figures", {}).items():
        doc = load_json(name)
        for phrase, specs in figures.items():
            specs = [specs] if isinstance(specs, str) else specs
            pattern, matched = phrase_pattern(phrase), False
            if pattern.groups != len(specs):
                problems.append(f"{page}: {phrase!r} has {pattern.groups} figures and {len(specs)} fields")
                continue
            for m in pattern.finditer(text):
                hits = [found.get(m.start(g + 1)) for g in range(pattern.groups)]
                if any(t is None or t.rule or t.end != m.end(g + 1) for g, t in enumerate(hits)):
                    continue  # inside code or a name: by rule no figure
                matched = True
                for t, spec in zip(hits, specs):
                    cover(t.start, f"{name}: {spec}")
                    if why := shows(t, doc, spec, text):
                        problems.append(f"{page}: {t.shown} ({phrase!r}, {line_of(text, t.start)}): {why}")
            if not matched:
                problems.append(f"{page}: {phrase!r} ({name}) is not on the page")
    for t in found.values():
        if t.rule is None and t.start not in covered:
            context = " ".join(text[max(0, t.start - 40):t.end + 20].split())
            problems.append(f"{page}: unregistered figure {t.shown} at {line_of(text, t.start)}: ...{context}...")
    return problems + claim_problems(page, text, entry)


def line_of(text: str, offset: int) -> str:
    return f"line {text.count(chr(10), 0, offset) + 1}"


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))
