"""The docs say only what the results files hold: the figures check (tests/support/doc_figures.py
says how figures, fenced outputs, signs and claims are tied to ``docs/figures.toml``), and the pages'
other rules: results files cited, no run logs, links that resolve, the map of the code complete.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.doc_figures import (
    DOCS,
    FENCE,
    RESULTS,
    ROOT,
    Token,
    check_page,
    doc_pages,
    line_of,
    load_registry,
    page_name,
    phrase_pattern,
    tokens,
)

BENCH_DOC = DOCS / "benchmarks.md"
CITATION = re.compile(r"benchmarks/results/([\w.-]+\.(?:json|png))")
RUN_VARIANT = re.compile(r"_(run\d+|cut|tput|direct|paused|engines_paused|bounded|vllm_defaults|old|new|tmp|bak|"
                         r"v\d+|\d+)$")
RUN_LOG_PHRASES = re.compile(r"\brun ?\d\b|a second run|earlier runs|the run's log|from the log|"
                             r"the last (full )?run\b|first drill", re.I)
README_MAX_LINES = 160


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
        assert set(entry) <= {"figures", "not_figures", "tables", "claims"}, f"{page}: {sorted(entry)}"
        for name in [*entry.get("figures", {}), *entry.get("tables", {}), *entry.get("claims", {})]:
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


TTFT = "layouts.colocated.summary.paired_off_minus_batch50_p50_ms.stream.c1.client_ttft"  # negative: sooner


def test_a_figure_must_have_its_fields_sign():
    """A bare figure is read through its direction word: "sooner" for a negative difference passes,
    "later" fails, and so does a negative field shown with neither a sign nor a word; a ratio has
    no sign. The old check compared sizes only, so "28.9 ms later" passed where the file says sooner."""
    timing = json.loads((RESULTS / "server_timing.json").read_text())
    median = timing["layouts"]["colocated"]["summary"]["paired_off_minus_batch50_p50_ms"]["stream"]["c1"]
    shown = f"{abs(median['client_ttft']['median']):.3f}"
    assert median["client_ttft"]["median"] < 0  # the planted words below depend on it

    def problems(text: str, phrase: str, spec: str = f"{TTFT}.median") -> list[str]:
        return check_page("x.md", text, {"x.md": {"figures": {"server_timing.json": {phrase: spec}}}})

    assert problems(f"the first token arrived {shown} ms sooner.", f"arrived {{{shown}}} ms") == []
    assert problems(f"it was down {shown} ms.", f"down {{{shown}}} ms") == []
    for text, why in ((f"the first token arrived {shown} ms later.", "says 28.901 'later'"),
                      (f"the first token arrived {shown} ms slower.", "says 28.901 'slower'"),
                      (f"it was up by {shown} ms.", "says 28.901 'up'"),
                      (f"it moved {shown} ms.", "shown with neither its sign nor a direction word")):
        found = problems(text, text.split(" ", 2)[2].replace(shown, "{" + shown + "}").rstrip("."))
        assert len(found) == 1 and why.replace("28.901", shown) in found[0], (text, found)
    assert problems(f"it moved -{shown} ms.", f"moved {{-{shown}}} ms") == []
    assert problems(f"it moved +{shown} ms.", f"moved {{+{shown}}} ms") != []
    # the shipped page with "sooner" turned into "later", on the page and in its registered phrase: caught
    page, registry = (DOCS / "benchmarks.md").read_text(), load_registry()
    figures = registry["docs/benchmarks.md"]["figures"]["server_timing.json"]
    spec = figures.pop("the first token arrived {28.901} ms sooner at c=1")
    figures["the first token arrived {28.901} ms later at c=1"] = spec
    planted = page.replace("28.901 ms sooner", "28.901 ms later")
    assert planted != page
    (found,) = [p for p in check_page("docs/benchmarks.md", planted, registry) if "28.901" in p]
    assert f"the page says 28.901 'later', but {spec} holds {median['client_ttft']['median']}" in found, found
    shipped = json.loads((RESULTS / "paired_ab.json").read_text())["summary"]["embedded"]["c8_median_block_ratio"]
    ratio = {"x.md": {"figures": {"paired_ab.json": {f"x{{{shipped}}} faster": "summary.embedded.c8_median_block_ratio"}}}}
    assert check_page("x.md", f"x{shipped} faster", ratio) == []  # a ratio is no signed difference


def test_what_a_fenced_block_shows_a_command_print_is_checked():
    """Output lines and command comments of fenced blocks are figures like prose; a command's
    arguments, config blocks and code are not. The old check blanked every fence, so README.md's
    "solved 58/64" could say anything."""
    registry, page = load_registry(), (ROOT / "README.md").read_text()
    assert check_page("README.md", page, registry) == []
    for old, new in (("solved 58/64 = 90.6% (95% CI", "solved 57/64 = 90.6% (95% CI"),
                     ("(95% CI 81.0%-95.6%)", "(95% CI 81.0%-96.6%)"),
                     ("# solved 58/64 = 90.6% ...", "# solved 58/64 = 92.6% ...")):
        assert old in page, old
        assert check_page("README.md", page.replace(old, new), registry) != [], new
    text = ("```\nsolved 3 of them in 12.5 s\n$ maze-eval --seeds 40  # took 7.5 s\n```\n"
            "```yaml\nconcurrency: 16   # 30 s\n```\n```bash\nmaze-eval -c 8   # 4.5 s\n```\n"
            "```python\nx = range(64)   # frame: (175, 175, 3) at 2026-12-04T17:54:20+00:00\n```\n")
    shown = [t.shown for t in tokens(text) if t.rule is None]
    assert shown == ["3", "12.5", "7.5", "4.5", "175", "175", "3"], shown


def test_claims_about_rounds_and_spreads_must_be_registered_and_hold():
    """"in every round", "in sign", "within the ... spread" are claims: unregistered they fail, and a
    registered one is checked against its field. The old pages said the paired medians were
    "consistent in sign over the rounds" and that two variants moved "both sides alike within a run's
    spread"; the results files say otherwise."""
    registry = load_registry()
    old_timing = ("the p50s of one stack and the paired medians, consistent in sign over the rounds, are what "
                  "the file is for.")
    assert any("unregistered claim 'in sign'" in p for p in check_page("x.md", old_timing, registry))
    rounds = "layouts.colocated.summary.paired_off_minus_batch50_p50_ms.stream.c1.client_last.rounds"
    timing = {"x.md": {"claims": {"server_timing.json": {"came sooner in every round": f"all_negative {rounds}"}}}}
    assert any("does not hold" in p for p in check_page("x.md", "the last chunk came sooner in every round", timing))
    timing["x.md"]["claims"]["server_timing.json"] = {"but not in every round": f"mixed_sign {rounds}"}
    assert check_page("x.md", "sooner at the median, but not in every round", timing) == []
    old_ab = "Ray's niceness moves both sides alike within a run's spread."
    niceness = "within summary.ray-niceness-0.c8_median_block_ratio summary.embedded.c8_spread"
    spread = {"x.md": {"claims": {"paired_ab.json": {"alike within a run's spread": niceness}}}}
    assert any("does not hold" in p for p in check_page("x.md", old_ab, spread))
    assert any("unregistered claim" in p for p in check_page("x.md", old_ab, {}))
    assert any("is not on the page" in p for p in check_page("x.md", "nothing here", spread))


def test_the_compare_example_pairs_the_shipped_outcomes():
    """docs/lifecycle.md's ``maze-eval compare`` output is the stable version's outcomes
    (models/scores_gateway.json) paired by seed with the canary's, an untrained LoRA that plays as
    its base (models/scores_hf.json's maze-tiny), with the product's McNemar test."""
    from evaluation.stats import mcnemar_exact

    def outcomes(name: str, model: str) -> dict[str, bool]:
        (row,) = [r for r in json.loads((ROOT / "models" / name).read_text()) if r["model"] == model]
        return row["outcomes"]

    a, b = outcomes("scores_gateway.json", "maze-grpo"), outcomes("scores_hf.json", "maze-tiny")
    seeds = set(a) & set(b)
    both, only_a, only_b = (sum(1 for s in seeds if x(a[s], b[s])) for x in (
        lambda p, q: p and q, lambda p, q: p and not q, lambda p, q: q and not p))
    neither = len(seeds) - both - only_a - only_b
    page = (DOCS / "lifecycle.md").read_text()
    assert f"# {len(seeds)} paired seeds: both {both}, only A {only_a}, only B {only_b}, neither {neither}\n" in page
    assert f"exact McNemar p = {mcnemar_exact(only_a, only_b):.3g}\n" in page


PRODUCT = ("agent", "serving", "evaluation", "training", "maze_gateway")
SPEED_RATIO = re.compile(r"~?\d+(?:\.\d+)?x (?:slower|faster|quicker|cheaper)|\d+(?:\.\d+)?% (?:slower|faster|quicker)")


def test_product_text_states_no_speed_ratio():
    """A measured speed-up belongs to a results file and the page that cites it (where the figures
    check holds it to its field), not to a docstring or a field description, where it goes stale
    unnoticed (``lora.cpu_kernels`` said ~12x slower after that result was gone)."""
    hits = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))
            for text in [path.read_text()] for m in SPEED_RATIO.finditer(text)]
    assert not hits, "\n".join(hits)


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
