"""Self-contained HTML report of a training run's served curve (``maze-eval report --curve SOURCE``).

Both curves over the steps (the trainer's own pass@1 and the solve rate through the gateway with its
95% interval), the gap between them, and the best served step picked out with its adapter version
and the command that serves it, so choosing what to promote needs nothing else.
"""

from __future__ import annotations

import html
import io
import itertools
from pathlib import Path

from evaluation.report import data_url
from evaluation.served import ServedCurve, served_curves
from evaluation.store import Store
from serving.adapters import ModelId

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:22px}
.best{background:#e8f5e9;border:2px solid #2e7d32;border-radius:6px;padding:10px 16px;margin:12px 0}
.best code{background:#fff;padding:2px 6px;border-radius:4px;user-select:all}
table.s{border-collapse:collapse;font-size:13px}table.s td,table.s th{border:1px solid #ddd;padding:3px 10px;text-align:right}
table.s td.v{font-family:monospace;text-align:left}tr.top{background:#e8f5e9;font-weight:bold}
.neg{color:#c62828}.pos{color:#2e7d32}
"""


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def curve_plot(curve: ServedCurve) -> str:
    """Both curves against the step (served with its 95% band), the best step marked; a PNG data: URL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p.step for p in curve.points]
    fig, (ax, gap_ax) = plt.subplots(2, 1, figsize=(9, 5.2), dpi=100, sharex=True,
                                     gridspec_kw={"height_ratios": [3, 1]})
    ax.fill_between(steps, [p.ci_low for p in curve.points], [p.ci_high for p in curve.points],
                    color="#1565c0", alpha=0.15, label="served 95% CI")
    ax.plot(steps, [p.served for p in curve.points], "o-", color="#1565c0", label="served (gateway)")
    trained = [p for p in curve.points if p.trainer_pass_at_1 is not None]
    if trained:
        ax.plot([p.step for p in trained], [p.trainer_pass_at_1 for p in trained], "s--", color="#ef6c00",
                label="trainer pass@1")
    best = curve.best
    if best is not None:
        ax.plot([best.step], [best.served], "*", color="#2e7d32", markersize=18, label=f"best: step {best.step}")
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel("solve rate")
    ax.set_title(f"{ModelId(curve.base, curve.adapter)} ({curve.source}) on {curve.env_id}")
    ax.legend(loc="lower right", fontsize=8)
    gaps = [(p.step, p.gap) for p in curve.points if p.gap is not None]
    spacing = min((b - a for a, b in itertools.pairwise(steps)), default=1)
    gap_ax.bar([s for s, _ in gaps], [g * 100 for _, g in gaps], width=0.6 * spacing,
               color=["#2e7d32" if g >= 0 else "#c62828" for _, g in gaps])
    if len(steps) <= 20:
        gap_ax.set_xticks(steps)
    gap_ax.axhline(0, color="#444", linewidth=0.8)
    gap_ax.set_ylabel("gap (points)")
    gap_ax.set_xlabel("training step")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return data_url(buf.getvalue(), "image/png")


def _rows(curve: ServedCurve) -> str:
    out = []
    for p in curve.points:
        gap = "-" if p.gap is None else f'<span class="{"neg" if p.gap < 0 else "pos"}">{p.gap * 100:+.1f}</span>'
        cls = ' class="top"' if p.step == curve.best_step else ""
        out.append(f"<tr{cls}><td>{'&#9733; ' if cls else ''}{p.step}</td><td>{_pct(p.trainer_pass_at_1)}</td>"
                   f"<td>{_pct(p.served)}</td><td>{p.ci_low:.1%}&ndash;{p.ci_high:.1%}</td><td>{gap}</td>"
                   f"<td>{p.n}</td><td class=\"v\">{html.escape(p.version)}</td>"
                   f"<td class=\"v\">{html.escape(p.run_id)}</td></tr>")
    return "".join(out)


def render_curve_html(curve: ServedCurve) -> str:
    """The report as one HTML string."""
    best = curve.best
    e = html.escape
    pick = ""
    if best is not None:
        trainer = f", trainer pass@1 {_pct(best.trainer_pass_at_1)}" if best.trainer_pass_at_1 is not None else ""
        pick = (f'<div class="best"><b>Best served step: {best.step}</b> &mdash; {_pct(best.served)} of {best.n} '
                f"(95% CI {best.ci_low:.1%}&ndash;{best.ci_high:.1%}){trainer}, version <code>{e(best.version)}</code>"
                f"<br>Serve it: <code>{e(curve.promote_command or '')}</code>"
                f"<br>Its episodes: <code>maze-eval report {e(best.run_id)}</code></div>")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>served curve {e(curve.source)}</title><style>{_CSS}</style></head><body>
<h1>Served curve of {e(curve.source)}</h1>
<p>Each exported step published as a version of <code>{e(str(ModelId(curve.base, curve.adapter)))}</code> and scored through
the gateway on {e(curve.env_id)}, pinned to that version (n: episodes scored per step); beside it the trainer's
own pass@1, from its own evaluation (its seeds, prompts and sampling). Gap: served minus trainer, in points.</p>
{pick}
<img alt="served and trainer curves" src="{curve_plot(curve)}">
<h2>Steps</h2>
<table class="s"><tr><th>step</th><th>trainer pass@1</th><th>served</th><th>95% CI</th><th>gap</th><th>n</th>
<th>version</th><th>run</th></tr>{_rows(curve)}</table>
</body></html>"""


def write_curve_report(store: Store, source: str, out_path: str | Path) -> Path:
    """Write the served-curve report of ``source``; raises ``KeyError`` if it has no served curve."""
    curves = served_curves(store, source)
    if not curves:
        raise KeyError(source)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_curve_html(curves[0]), encoding="utf-8")
    return path
