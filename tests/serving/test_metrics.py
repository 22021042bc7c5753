"""The gateway's metric names: the shipped Grafana dashboard reads only documented ones."""

from __future__ import annotations

import json


def test_grafana_dashboard_uses_documented_metrics():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    dash = json.loads((root / "k8s" / "grafana-dashboard.json").read_text())
    docs = (root / "docs" / "metrics.md").read_text()
    names = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"ray_[a-z_]+", t["expr"])}
    assert names
    for name in names:
        assert re.sub(r"_(bucket|count|sum)$", "", name) in docs, name
