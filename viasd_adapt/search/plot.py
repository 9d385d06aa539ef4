"""Convergence plot of a DIMR search: best cost vs. step, BO steps marked."""

from __future__ import annotations

from pathlib import Path

from viasd_adapt.io import save_figure
from viasd_adapt.search.dimr import BO, SearchResult


def plot_convergence(result: SearchResult, path: str | Path, random_costs: list[float] | None = None,
                     title: str = "DIMR mask search") -> Path:
    """Writes a PNG: every evaluated cost (dots; BO proposals as red triangles), the running best
    (a step line), and the median of the ``--compare-random`` masks (dashed) when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [e.step for e in result.history]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    random_points = [(e.step, e.cost) for e in result.history if e.kind != BO]
    bo_points = [(e.step, e.cost) for e in result.history if e.kind == BO]
    if random_points:
        ax.scatter(*zip(*random_points), s=12, color="0.6", label="random proposal", zorder=2)
    if bo_points:
        ax.scatter(*zip(*bo_points), s=28, marker="^", color="tab:red", label="BO proposal", zorder=3)
    ax.step(steps, result.best_curve(), where="post", color="tab:blue", linewidth=2, label="best so far", zorder=4)
    if random_costs:
        import statistics

        ax.axhline(statistics.median(random_costs), color="k", linestyle="--", linewidth=1,
                   label=f"median of {len(random_costs)} random masks")
    costs = [e.cost for e in result.history] + list(random_costs or [])
    if min(costs) > 0 and max(costs) / min(costs) > 3:
        ax.set_yscale("log")  # random masks can be orders of magnitude worse than the best ones
    ax.set_xlabel("step (mask evaluations)")
    ax.set_ylabel("routed-path cost C(u||p) + C(q||u)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
