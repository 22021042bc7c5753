"""The offline gate's error rates measured, not assumed: its default policy simulated on paired outcomes.

    PYTHONPATH=. .venv/bin/python benchmarks/gate_error_rate.py [--null-gates 20000] [--alt-gates 5000]

Each simulated gate plays the candidate and the version served on the same seeds, as ``maze-eval
gate`` does, and is judged by the gate's own test (``evaluation.gate.sequential``, the default policy
of ``adapters.gate``: alpha 0.05, looks at 16/32/48/64 seeds, at least 6 discordant seeds).

Paired outcomes: on each seed, with probability ``rho`` the two versions' outcomes come from one
uniform draw (``u < p``: a maze hard for one is hard for the other), else from two independent
ones; each version solves with its own probability ``p`` overall. Under the null both ``p`` are
equal, so every seed's solve probability is the same for both versions (and differs between seeds
when ``rho > 0``). ``rho`` is measured from the per-seed outcomes of two models on the fixed 64
mazes (``models/scores_hf.json``: maze-tiny against maze-grpo, the pair with the outcomes on record
whose scores differ; the same weights on two backends, ``models/scores_gateway.json``, agree on
every seed, ``rho = 1``), and a middle and a high value are run beside it.

Reported per scenario: the share of gates that promoted, left the name as worse, or ended
undecided, and the mean seeds played; under the null, the false-promotion rate with its exact
Clopper-Pearson 95% interval, and the exact promotion probability given each gate's discordant
counts averaged over the gates (the dynamic programme's own number, with no sampling noise in the
directions). Under the alternatives (90% against 95%, 80% against 95%, 44% against 97%) the same
with Bonferroni and with one exact test at 64 seeds, for comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.provenance import provenance  # noqa: E402
from evaluation.gate.sequential import Design, judge, promotion_probability  # noqa: E402
from serving.config import GatePolicy  # noqa: E402

NULL_P = (0.44, 0.90, 0.97)
ALTERNATIVES = ((0.90, 0.95), (0.80, 0.95), (0.44, 0.97))  # (served, candidate)
RHO_MORE = (0.5, 0.9)


def default_design(method: str = "spending") -> Design:
    policy = GatePolicy()
    return Design(alpha=policy.alpha, looks=tuple(policy.looks), min_discordant=policy.min_discordant, method=method)


def measured_rho() -> dict:
    """``rho`` of the outcome model from two models' per-seed outcomes: the both-failed share solved
    for the mixing weight between independent and shared draws (and the phi coefficient beside it)."""
    runs = {r["model"]: r["outcomes"] for r in json.loads((ROOT / "models" / "scores_hf.json").read_text())}
    a, b = runs["maze-tiny"], runs["maze-grpo"]
    seeds = sorted(set(a) & set(b), key=int)
    n = len(seeds)
    qa, qb = sum(not a[s] for s in seeds) / n, sum(not b[s] for s in seeds) / n
    both_fail = sum(not a[s] and not b[s] for s in seeds) / n
    rho = (both_fail - qa * qb) / (min(qa, qb) - qa * qb)
    phi = (both_fail - qa * qb) / math.sqrt(qa * (1 - qa) * qb * (1 - qb))
    return {"pair": "models/scores_hf.json maze-tiny vs maze-grpo", "seeds": n, "solve_rate": [1 - qa, 1 - qb],
            "both_failed": round(both_fail, 4), "rho": round(rho, 3), "phi": round(phi, 3)}


def play(rng: random.Random, seeds: int, p_cand: float, p_cur: float, rho: float) -> list[tuple[bool, bool]]:
    """``seeds`` paired outcomes (candidate, served) from the model above."""
    out = []
    for _ in range(seeds):
        if rng.random() < rho:
            u = rng.random()
            out.append((u < p_cand, u < p_cur))
        else:
            out.append((rng.random() < p_cand, rng.random() < p_cur))
    return out


def run_gate(design: Design, pairs: list[tuple[bool, bool]]) -> tuple[str, int, list[int]]:
    """The gate on ``pairs``: its verdict, the seeds it played, and the discordant counts at every look
    had it played them all (for the exact promotion probability)."""
    verdict, played, full, wins, losses = None, 0, [], 0, 0
    seen = 0
    for count in design.looks:
        for cand, cur in pairs[seen:count]:
            wins += cand and not cur
            losses += cur and not cand
        seen = count
        full.append(wins + losses)
        if verdict is None:
            look = judge(design, full, wins, losses)
            if look.verdict != "continue":
                verdict, played = look.verdict, count
    return verdict, played, full


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial proportion ``k / n``."""
    tail = (1 - level) / 2

    def cdf(x: int, p: float) -> float:  # P(X <= x), summed in log space
        if x < 0:
            return 0.0
        if x >= n:
            return 1.0
        logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
                + (n - i) * math.log1p(-p) for i in range(x + 1)]
        top = max(logs)
        return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))

    def solve(f, target: float) -> float:  # f decreasing in p
        lo, hi = 1e-12, 1 - 1e-12
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(lambda p: cdf(k - 1, p), 1 - tail)  # P(X >= k) = tail
    upper = 1.0 if k == n else solve(lambda p: cdf(k, p), tail)
    return lower, upper


def scenario(design: Design, p_cand: float, p_cur: float, rho: float, gates: int, seed: int) -> dict:
    rng = random.Random(seed)
    counts = {"better": 0, "worse": 0, "undecided": 0}
    seeds_played, exact = 0, 0.0
    for _ in range(gates):
        verdict, played, full = run_gate(design, play(rng, design.looks[-1], p_cand, p_cur, rho))
        counts[verdict] += 1
        seeds_played += played
        if p_cand == p_cur:
            exact += float(promotion_probability(design, full))
    out = {"served": p_cur, "candidate": p_cand, "rho": rho, "gates": gates,
           **{k: round(v / gates, 4) for k, v in counts.items()}, "mean_seeds": round(seeds_played / gates, 1)}
    if p_cand == p_cur:
        low, high = clopper_pearson(counts["better"], gates)
        out.update(false_promotion=round(counts["better"] / gates, 4),
                   false_promotion_ci95=[round(low, 4), round(high, 4)],
                   exact_promotion_given_discordant=round(exact / gates, 4))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--null-gates", type=int, default=20000, help="simulated gates per null scenario")
    ap.add_argument("--alt-gates", type=int, default=5000, help="simulated gates per alternative and design")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the first scenario (each next: +1)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gate_error_rate.json")
    args = ap.parse_args()
    t0 = time.process_time()
    corr = measured_rho()
    rhos = (corr["rho"], *RHO_MORE)
    design = default_design()
    seed = args.seed
    nulls, alternatives, compared = [], [], []
    for rho in rhos:
        for p in NULL_P:
            nulls.append(scenario(design, p, p, rho, args.null_gates, seed))
            seed += 1
        for p_cur, p_cand in ALTERNATIVES:
            alternatives.append(scenario(design, p_cand, p_cur, rho, args.alt_gates, seed))
            seed += 1
    others = {"bonferroni": default_design("bonferroni"),
              "one_look_at_64": Design(alpha=design.alpha, looks=(design.looks[-1],),
                                       min_discordant=design.min_discordant)}
    for name, other in others.items():
        for p_cur, p_cand in ALTERNATIVES:
            compared.append({"design": name, **scenario(other, p_cand, p_cur, corr["rho"], args.alt_gates, seed)})
            seed += 1
    worst = max(nulls, key=lambda s: s["false_promotion_ci95"][1])
    out = {"what": "the offline gate's default policy on simulated paired outcomes: false-promotion rate under the "
                   "null (equal per-seed solve probabilities) and power under alternatives",
           "policy": GatePolicy().model_dump(), "test": design.label, "correlation": corr, "rhos": list(rhos),
           "null": nulls, "alternatives": alternatives, "compared": compared,
           "summary": {"alpha": design.alpha, "max_false_promotion": max(s["false_promotion"] for s in nulls),
                       "max_false_promotion_ci95_high": worst["false_promotion_ci95"][1],
                       "max_exact_promotion_given_discordant": max(s["exact_promotion_given_discordant"]
                                                                  for s in nulls),
                       "within_alpha": all(s["false_promotion_ci95"][1] <= design.alpha for s in nulls)},
           "cpu_s": round(time.process_time() - t0, 1), **provenance(sys.argv)}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))
    for s in alternatives:
        print(f"served {s['served']:.0%} candidate {s['candidate']:.0%} rho {s['rho']}: promoted {s['better']:.1%}, "
              f"undecided {s['undecided']:.1%}, mean seeds {s['mean_seeds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
