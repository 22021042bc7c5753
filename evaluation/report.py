"""Self-contained HTML report of a run: summary, manifest, outcome grid with GIF replays, plots.

Everything (plots, GIFs) is embedded as data: URLs, so the file can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from pathlib import Path

from agent.runner import EpisodeRecord
from agent.tools import replay_frames
from evaluation.manifest import RunManifest
from evaluation.served import served_step_of_run
from evaluation.store import Store
from evaluation.summary import summarize
from serving.adapters import ModelId

COLOURS = {"goal": "#2e7d32", "wrong_stop": "#c62828", "turn_limit": "#ef6c00", "error": "#616161"}


def _count(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def data_url(data: bytes, mime: str) -> str:
    """``data`` inline as a data URL: the report is one self-contained file."""
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def gif_bytes(rec: EpisodeRecord, ms_per_frame: int = 350) -> bytes:
    """Animated GIF of one episode (half-size frames keep the report small)."""
    from PIL import Image

    frames = [Image.fromarray(f).resize((f.shape[1] // 2, f.shape[0] // 2), Image.NEAREST) for f in replay_frames(rec)]
    buf = io.BytesIO()
    durations = [ms_per_frame] * (len(frames) - 1) + [ms_per_frame * 4]
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=durations, loop=0)
    return buf.getvalue()


def _plots(records: list[EpisodeRecord]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scored = [r for r in records if r.scored]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4), dpi=100)
    solved = [r.num_turns for r in scored if r.success]
    failed = [r.num_turns for r in scored if not r.success]
    top = max([r.num_turns for r in scored], default=1)
    bins = [b - 0.5 for b in range(top + 2)]  # centre each bar on its whole turn count
    ax1.hist([solved, failed], bins=bins, stacked=True, color=[COLOURS["goal"], COLOURS["wrong_stop"]], label=["solved", "not solved"])
    ax1.set_xlabel("turns")
    ax1.set_ylabel("episodes")
    ax1.set_title("Turns per episode")
    ax1.legend()
    by_len: dict[int, list[bool]] = defaultdict(list)
    for r in scored:
        if r.optimal_moves is not None:
            by_len[r.optimal_moves].append(r.success)
    lengths = sorted(by_len)
    rates = [sum(by_len[k]) / len(by_len[k]) for k in lengths]
    ax2.bar([str(k) for k in lengths], rates, color="#1565c0")
    for i, k in enumerate(lengths):
        ax2.text(i, rates[i] + 0.02, f"n={len(by_len[k])}", ha="center", fontsize=8)
    ax2.set_ylim(0, 1.1)
    ax2.set_xlabel("optimal path length (moves)")
    ax2.set_ylabel("solve rate")
    ax2.set_title("Solve rate by optimal path length")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return {"plots": data_url(buf.getvalue(), "image/png")}


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}.kpi{display:flex;gap:24px;margin:12px 0}.kpi div{background:#f3f5f7;padding:10px 16px;border-radius:6px}
.kpi b{display:block;font-size:22px}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(104px,1fr));gap:8px}
.card{border:4px solid;border-radius:6px;padding:2px;text-align:center;font-size:11px}
.card img{width:88px;height:88px;image-rendering:pixelated}
table.m{border-collapse:collapse;font-size:12px}table.m td{border:1px solid #ddd;padding:3px 8px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;color:#fff;border-radius:4px;font-size:12px}
"""


def render_html(run: dict, records: list[EpisodeRecord], checkpoint: dict | None = None) -> str:
    """The report as one HTML string; ``checkpoint`` (a served step: source, step, adapter, version)
    names the training step the run scored and where its curve is."""
    m = RunManifest.model_validate(run["manifest"])
    episode_rows = [{**r.summary(), "success": r.success, "tokens": r.total_tokens} for r in records]
    s = summarize(episode_rows, m.samples)
    # The manifest's fields with the runner's settings among them, one table row each.
    manifest = {**m.model_dump(mode="json", exclude={"runner"}), **m.runner.model_dump(mode="json")}
    cards = []
    for r in records:
        colour = COLOURS[r.stop_reason.value]
        title = f"seed {r.seed} · {r.stop_reason.value} · {r.num_turns} turns (optimal {r.optimal_moves})"
        cards.append(
            f'<div class="card" style="border-color:{colour}" title="{html.escape(title)}">'
            f'<img alt="seed {r.seed}" src="{data_url(gif_bytes(r), "image/gif")}"><br>seed {r.seed}'
            f"{'' if r.sample == 0 else f'/{r.sample}'} · {r.num_turns}t</div>"
        )
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(json.dumps(v) if isinstance(v, (dict, list)) else str(v))}</td></tr>"
                   for k, v in manifest.items())
    legend = "".join(f'<span style="background:{c}">{k}</span>' for k, c in COLOURS.items())
    plots = _plots(records)["plots"] if records else ""
    kpis = [("solve rate", f"{s.solve_rate:.1%}"), ("95% CI", f"{s.ci_low:.1%}–{s.ci_high:.1%}"), ("solved", f"{s.solved}/{s.n}"),
            ("errors", str(s.errors)), ("mean turns (solved)", f"{s.mean_turns_solved:.2f}" if s.mean_turns_solved else "-"),
            ("path efficiency", f"{s.path_efficiency:.1%}" if s.path_efficiency else "-"),
            ("tokens / solve", _count(s.tokens_per_solve)),
            ("completion tokens / solve", _count(s.completion_tokens_per_solve))]
    kpi_html = "".join(f"<div>{k}<b>{v}</b></div>" for k, v in kpis)
    step_html = ""
    if checkpoint:
        c = {k: html.escape(str(v)) for k, v in checkpoint.items()}
        step_html = (f"<p>step {c['step']} of training run <code>{c['source']}</code>, published as "
                     f"<code>{ModelId(None, c['adapter'], c['version'])}</code>; the run's served curve: "
                     f"<code>maze-eval report --curve {c['source']}</code></p>")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>maze-eval {html.escape(run['run_id'])}</title><style>{_CSS}</style></head><body>
<h1>{html.escape(m.model_id)} on {html.escape(m.env_id)}</h1>
<p>run <code>{html.escape(run['run_id'])}</code> · status {html.escape(run['status'])} · protocol {html.escape(m.protocol)} · history {html.escape(m.history)}</p>
{step_html}<div class="kpi">{kpi_html}</div>
<h2>Episodes</h2><p class="legend">{legend}</p><div class="grid">{''.join(cards)}</div>
<h2>Plots</h2>{f'<img alt="plots" src="{plots}">' if plots else '<p>no episodes</p>'}
<h2>Manifest</h2><table class="m">{rows}</table>
</body></html>"""


def write_report(store: Store, run_id: str, out_path: str | Path) -> Path:
    """Write the report of ``run_id``; raises ``KeyError`` if the run does not exist."""
    run = store.get_run(run_id)
    if run is None:
        raise KeyError(run_id)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(run, store.episode_records(run_id), served_step_of_run(store, run_id)), encoding="utf-8")
    return path
