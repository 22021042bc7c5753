"""The docs say only what the results files hold.

Every measured figure in the prose and tables of README.md and docs/*.md is registered in
``docs/figures.toml``: per page, per results file (``benchmarks/results/NAME.json``, or a repository
path such as ``models/scores_gateway.json``), a phrase of the page with the figure in braces and the
JSON path of the field that holds it::

    ["docs/benchmarks.md".figures."load_checks.json"]
    "A cold load now takes {32.6} ms" = "summary.replica_load_s_median *1000"  # s as ms; *100: % of a fraction
    "{14.7}% (95% interval" = "summary.checks_share_median *100"
    ["docs/benchmarks.md".figures."auth_overhead.json"]
    "was {0.23}, {0.20}" = ["rounds[0].p50_delta_ms half_up", "rounds[1].p50_delta_ms"]  # half_even unless so

The field, times the scale, rounded to the places the page shows, must equal the figure (signed
where the page shows a sign); a phrase with several braces takes a list of paths. A page's
``not_figures`` lists the phrases whose numbers are not measurements (a config default, a count of
things, the 64-maze set), each with its reason; its ``tables`` names tables a script prints from a
results file (``"fault_matrix.json" = "benchmarks/fault_matrix.py:markdown_table"``), compared whole.
Numbers that are not figures by rule (``rule``): code, link targets, URLs, headings, list numbering,
parts of names (``p50``, ``Qwen3``, ``rank-64``, ``c=8``), counts in compound words (``2-core``),
ranges written ``0..63``, what a count is out of (the 64 of ``26/64``), versions and addresses,
HTTP statuses.

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
import tomllib
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCH_DOC = DOCS / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"
REGISTRY = DOCS / "figures.toml"

CITATION = re.compile(r"benchmarks/results/([\w.-]+\.(?:json|png))")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# Regions whose numbers are never figures, blanked in this order (a fence first: its backticks are
# not code spans). CommonMark code spans may cross a line; ``double`` ones may hold single backticks.
MASKS = (FENCE, re.compile(r"<!--.*?-->", re.S), re.compile(r"``(?:[^`]|`(?!`))+?``|`[^`]+?`"),
         re.compile(r"\]\([^)]*\)"), re.compile(r"https?://\S+"), re.compile(r"^#{1,6} .*$", re.M))
NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)*(?:[eE][+-]?\d+)?")
STATUSES = {"200", "201", "204", "400", "401", "403", "404", "408", "409", "413", "422", "429", "500", "502",
            "503", "504"}
# A letter just before a number, or through one or two marks: a name, a label or a version pin.
GLUED = re.compile(r"[A-Za-z_][-=:(#/@<>!~]{0,2}\Z")
VERSIONED = re.compile(r"(?:Python|Ray|LLM|vLLM|SkyRL|Debian|Ubuntu) \Z")
RUN_VARIANT = re.compile(r"_(run\d+|cut|tput|direct|paused|engines_paused|bounded|vllm_defaults|old|new|tmp|bak|"
                         r"v\d+|\d+)$")
RUN_LOG_PHRASES = re.compile(r"\brun ?\d\b|a second run|earlier runs|the run's log|from the log|"
                             r"the last (full )?run\b|first drill", re.I)
README_MAX_LINES = 160


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


def masked(text: str, extra: list[tuple[int, int]] = ()) -> str:
    """``text`` with its code, comments, link targets, URLs, headings and ``extra`` spans blanked
    (same length, newlines kept), so offsets stay those of the page."""
    chars = list(text)

    def blank(a: int, b: int) -> None:
        chars[a:b] = [c if c == "\n" else " " for c in chars[a:b]]

    for a, b in extra:
        blank(a, b)
    for mask in MASKS:
        for m in mask.finditer("".join(chars)):
            blank(*m.span())
    return "".join(chars)


def rule(text: str, start: int, end: int, token: str) -> str | None:
    """Why the number at ``text[start:end]`` is not a figure, or None (``text`` is masked)."""
    before, after = text[max(0, start - 2):start].rjust(2), text[end:end + 2].ljust(2)
    name = lambda c: c.isalpha() or c == "_"  # noqa: E731
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
    line_start = text.rfind("\n", 0, start) + 1
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
SPEC = re.compile(r"^(?P<path>\S+)(?:\s+\*(?P<scale>\d+))?(?:\s+(?P<rounding>half_up|half_even))?$")


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


def shows(token: Token, doc, spec: str) -> str | None:
    """Why ``token`` is not what ``spec`` (``path [*scale] [rounding]``) of ``doc`` holds, or None."""
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
    return None if want == token.value else f"{spec} holds {value} (shown: {want})"


def script_function(spec: str):
    """``benchmarks/x.py:name``: that function of the script, loaded from its file."""
    path, _, name = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(module_spec)
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
    """Problems of one page: unregistered figures, figures their field does not hold, stale entries."""
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
                    if why := shows(t, doc, spec):
                        problems.append(f"{page}: {t.shown} ({phrase!r}, {line_of(text, t.start)}): {why}")
            if not matched:
                problems.append(f"{page}: {phrase!r} ({name}) is not on the page")
    for t in found.values():
        if t.rule is None and t.start not in covered:
            context = " ".join(text[max(0, t.start - 40):t.end + 20].split())
            problems.append(f"{page}: unregistered figure {t.shown} at {line_of(text, t.start)}: ...{context}...")
    return problems


def line_of(text: str, offset: int) -> str:
    return f"line {text.count(chr(10), 0, offset) + 1}"


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --- the tests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("page", doc_pages(), ids=page_name)
def test_every_figure_is_registered_and_its_field_holds_it(page):
    problems = check_page(page_name(page), page.read_text(), load_registry())
    assert not problems, "\n".join(problems)


def test_the_registry_names_only_pages_and_results_files_that_exist():
    registry = load_registry()
    pages = {page_name(p) for p in doc_pages()}
    assert set(registry) <= pages, f"registry pages that do not exist: {sorted(set(registry) - pages)}"
    for page, entry in registry.items():
        assert set(entry) <= {"figures", "not_figures", "tables"}, f"{page}: {sorted(entry)}"
        for name in [*entry.get("figures", {}), *entry.get("tables", {})]:
            assert (ROOT / name if "/" in name else RESULTS / name).is_file(), f"{page}: {name} does not exist"


def mutate(text: str, token: Token) -> tuple[str, str]:
    """The page with one digit of ``token`` changed (its last, so the places shown stay), and the new figure."""
    i = max(i for i, c in enumerate(token.shown) if c.isdigit())
    shown = token.shown[:i] + str((int(token.shown[i]) + 3) % 10) + token.shown[i + 1:]
    return text[:token.start] + shown + text[token.end:], shown


def registered_figures(page: str, text: str, registry: dict) -> list[Token]:
    """The page's tokens some figure phrase of the registry covers."""
    starts = set()
    for figures in registry[page].get("figures", {}).values():
        for phrase in figures:
            pattern = phrase_pattern(phrase)
            starts |= {m.start(g + 1) for m in pattern.finditer(text) for g in range(pattern.groups)}
    return [t for t in tokens(text) if t.start in starts and t.rule is None]


@pytest.mark.parametrize("page", ["README.md", "docs/benchmarks.md", "docs/scale-out.md", "docs/serving.md",
                                  "docs/lifecycle.md"])
def test_the_check_fails_when_a_registered_figure_changes(page):
    """Any registered figure changed by one digit (a few per page, spread over it) is reported."""
    registry, text = load_registry(), (ROOT / page).read_text()
    figures = registered_figures(page, text, registry)
    assert len(figures) >= 3, f"{page}: {len(figures)} registered figures"
    for token in figures[:: max(1, len(figures) // 6)]:
        changed, shown = mutate(text, token)
        problems = check_page(page, changed, registry)
        assert any(f"unregistered figure {shown} " in p for p in problems), \
            f"{page}: {token.shown} at {line_of(text, token.start)} changed to {shown}: {problems}"


def test_the_check_reports_new_figures_and_ignores_code():
    """A new figure in prose is unregistered; the same number in code, a name, a version or a range
    is not a figure; a field that holds another value fails."""
    pooled = json.loads((ROOT / "benchmarks" / "results" / "auth_overhead.json").read_text())["pooled"]
    p50, wrong_p95 = f"{pooled['open_p50_ms']:.2f}", f"{pooled['open_p95_ms'] + 0.01:.2f}"  # one right, one not
    registry = {"x.md": {"figures": {"auth_overhead.json": {f"p50 {{{p50}}} ms": "pooled.open_p50_ms",
                                                              f"p95 {{{wrong_p95}}} ms": "pooled.open_p95_ms"}}}}
    text = f"p50 {p50} ms and p95 {wrong_p95} ms"
    problems = check_page("x.md", text, registry)
    assert len(problems) == 1 and wrong_p95 in problems[0], problems
    assert any("unregistered figure 7.2" in p for p in check_page("x.md", text + ", 7.2 ms more", registry))
    quiet = text + "; `--rounds 0.5`, Ray 2.60.1, Python 3.11, p50, Qwen3-VL-8B, c=8, 2-core, seeds 0..63, 404\n"
    assert check_page("x.md", quiet, registry) == problems
    assert [t.rule is None for t in tokens("x1.082 and 12x, -8.6% and 0.22-0.31")] == [True] * 5
    assert [t.shown for t in tokens("-8.6% and 0.22-0.31")] == ["-8.6", "0.22", "0.31"]


def test_results_hold_one_file_per_benchmark_no_run_variants():
    variants = [p.name for p in RESULTS.iterdir() if RUN_VARIANT.search(p.stem)]
    assert not variants, f"run variants under benchmarks/results: {variants}"


def test_every_results_file_cited_exists_and_every_file_is_cited():
    cited_anywhere = {c for page in doc_pages() for c in CITATION.findall(page.read_text())}
    missing = sorted(c for c in cited_anywhere if not (RESULTS / c).is_file())
    assert not missing, f"docs cite results files that do not exist: {missing}"
    in_bench_doc = set(CITATION.findall(BENCH_DOC.read_text()))
    uncited = sorted(p.name for p in RESULTS.iterdir() if p.is_file() and p.name not in in_bench_doc)
    assert not uncited, f"results files docs/benchmarks.md does not cite: {uncited}"


@pytest.mark.parametrize("page", doc_pages(), ids=page_name)
def test_no_run_logs_in_docs(page):
    hits = [m.group(0) for m in RUN_LOG_PHRASES.finditer(FENCE.sub(" ", page.read_text()))]
    assert not hits, f"{page.name} reads like a run log: {hits}"


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", doc_pages(), ids=page_name)
def test_links_between_pages_resolve(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: outside the repository
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


PACKAGES = ("agent", "agent/maze", "agent/protocol", "agent/env", "agent/runner", "agent/tools", "agent/cli", "serving",
            "evaluation", "training", "training/cli", "training/skyrl", "training/tiny", "training/tiny/model",
            "training/tiny/fastpath", "training/tiny/data", "training/tiny/policies", "training/tiny/trainers",
            "training/tiny/diagnostics", "training/tiny/gpu", "maze_gateway")


def test_architecture_names_every_module():
    """docs/architecture.md is the map of the code: each package's section names each of its modules."""
    parts = re.split(r"^#{2,3} ", (DOCS / "architecture.md").read_text(), flags=re.M)
    by_heading = {part.split()[0].rstrip("/"): part for part in parts[1:]}
    missing = []
    for package in PACKAGES:
        # a subpackage with no section of its own (training/cli) is described in its parent's
        text = by_heading.get(package) or by_heading[package.rsplit("/", 1)[0]]
        for module in sorted((ROOT / package).glob("*.py")):
            if module.name != "__init__.py" and f"{module.name}`" not in text and f"`{module.stem}`" not in text:
                missing.append(f"{package}/{module.name}")
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_docs_index_links_every_page():
    index = (DOCS / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "README.md":
            assert f"({page.name}" in index, f"docs/README.md does not link {page.name}"
            assert f"(docs/{page.name}" in readme, f"README.md's map does not link docs/{page.name}"
