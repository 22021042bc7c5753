"""The docs say only what the results files say.

Every decimal figure in a section of docs/benchmarks.md must be one of the numbers in the results
file(s) that section cites (``benchmarks/results/NAME.json``), at the precision the doc shows;
benchmarks/results holds one file per benchmark (no run variants), each cited there; README.md
stays a front page. Pure and fast: reads files only.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCH_DOC = DOCS / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"

CITATION = re.compile(r"benchmarks/results/([\w.-]+\.(?:json|png))")
# A decimal number: digits (thousands separated by commas or not), a point, digits, an optional
# exponent. Not part of a longer dotted token (a version such as 2.60.1) or of a word, except for
# the "x" of a ratio (x1.076).
DECIMAL = re.compile(r"(?<![\d.,a-wyzA-WYZ_])(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)([eE][+-]?\d+)?(?![\d]|\.\d)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# Units a results file may hold a figure in while the doc shows it scaled: seconds shown as ms,
# a fraction shown as a percentage.
SCALES = (Decimal(1), Decimal(1000), Decimal(100))
RUN_VARIANT = re.compile(r"_(run\d+|cut|tput|direct|paused|engines_paused|bounded|vllm_defaults|old|new|tmp|bak|"
                         r"v\d+|\d+)$")
RUN_LOG_PHRASES = re.compile(r"\brun ?\d\b|a second run|earlier runs|the run's log|from the log|"
                             r"the last (full )?run\b|first drill", re.I)
README_MAX_LINES = 160


def sections(markdown: str) -> list[tuple[str, str]]:
    """(heading, text) for the preamble and every ``## `` section; ``###`` stays in its section."""
    out, title, lines = [], "(preamble)", []
    in_fence = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if line.startswith("## ") and not in_fence:
            out.append((title, "\n".join(lines)))
            title, lines = line[3:].strip(), []
        else:
            lines.append(line)
    out.append((title, "\n".join(lines)))
    return out


def figures(text: str) -> list[tuple[str, Decimal, int]]:
    """The decimal figures of prose and tables: (as shown, absolute value, decimals shown).

    Code (fenced blocks, inline spans) and link targets are names and commands, not figures."""
    prose = LINK_TARGET.sub("]", CODE_SPAN.sub(" ", FENCE.sub(" ", text)))
    out = []
    for m in DECIMAL.finditer(prose):
        whole, frac, exp = m.group(1).replace(",", ""), m.group(2), m.group(3) or ""
        value = Decimal(f"{whole}.{frac}{exp}")
        shown = -value.as_tuple().exponent if exp else len(frac)
        out.append((m.group(0), value, max(shown, 0)))
    return out


def numbers(obj) -> list[Decimal]:
    """Every number in a JSON document (booleans are not numbers), as written."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return []
    if isinstance(obj, Decimal):
        return [abs(obj)]
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in numbers(v)]
    if isinstance(obj, list):
        return [n for v in obj for n in numbers(v)]
    return []


def load_numbers(path: Path) -> list[Decimal]:
    return numbers(json.loads(path.read_text(), parse_float=Decimal, parse_int=Decimal))


class Index:
    """The numbers of some results files, rounded the ways a doc may show them."""

    def __init__(self, values: list[Decimal]):
        self.values = values
        self._by_places: dict[int, set[Decimal]] = {}

    def has(self, value: Decimal, places: int) -> bool:
        if places not in self._by_places:
            q = Decimal(1).scaleb(-places)
            self._by_places[places] = {(v * s).quantize(q, rounding=r) for v in self.values for s in SCALES
                                       for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)}
        return value.quantize(Decimal(1).scaleb(-places)) in self._by_places[places]


def unmatched(text: str, index: Index) -> list[str]:
    """The figures of ``text`` that no number of the index shows at the doc's precision."""
    return [shown for shown, value, places in figures(text) if not index.has(value, places)]


def check_section(title: str, text: str) -> list[str]:
    """Problems of one section of docs/benchmarks.md (empty: it says only what its files say)."""
    found = figures(text)
    if not found:
        return []
    cited = sorted({c for c in CITATION.findall(text) if c.endswith(".json")})
    if not cited:
        return [f"{title!r}: figures {[f[0] for f in found][:5]} but no benchmarks/results/NAME.json cited"]
    missing = [c for c in cited if not (RESULTS / c).is_file()]
    if missing:
        return [f"{title!r}: cites missing {missing}"]
    index = Index([n for c in cited for n in load_numbers(RESULTS / c)])
    bad = unmatched(text, index)
    return [f"{title!r}: {bad} not in {cited}"] if bad else []


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_figure_in_benchmarks_md_is_in_the_results_file_its_section_cites():
    problems = [p for title, text in sections(BENCH_DOC.read_text()) for p in check_section(title, text)]
    assert not problems, "\n".join(problems)


def test_the_check_fails_on_a_figure_the_file_does_not_hold():
    """The checker itself: a planted wrong figure, a figure at more precision than the file holds,
    a figure cited from the wrong file, and a section with figures but no citation all fail."""
    title, text = next((t, x) for t, x in sections(BENCH_DOC.read_text()) if "auth_overhead.json" in t)
    assert check_section(title, text) == []
    assert check_section(title, text + "\nA p50 of 6.92 ms.\n")  # auth_overhead.json has 6.914, not 6.92
    assert check_section(title, text + "\nA p50 of 6.9140 ms.\n") == []  # the file's 6.914, a trailing 0
    assert check_section(title, text + "\nA p50 of 6.9141 ms.\n")  # more places than the file holds
    assert check_section("x", "p50 6.914 ms (`benchmarks/results/rollout_cache.json`)")  # wrong file
    assert check_section("x", "p50 6.914 ms, uncited")
    # Units: seconds shown as ms, fractions as %, thousands separators, ratios written x1.085.
    idx = Index([Decimal("0.0714"), Decimal("0.2561"), Decimal("1085.25"), Decimal("1.085")])
    assert unmatched("71.4 ms, 25.61%, 25.6%, 1,085.25 and x1.085", idx) == []
    assert unmatched("71.5 ms, 0.2562, 1,085.4", idx) == ["71.5", "0.2562", "1,085.4"]
    # Code, commands and versions are not figures.
    assert figures("`--rounds 0.5` Ray 2.60.1 and\n```\n1.5\n```\n[x](v1.2)") == []


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


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)
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


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)
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


PACKAGES = ("agent", "serving", "evaluation", "training", "training/cli", "training/skyrl", "training/tiny",
            "maze_gateway")


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
