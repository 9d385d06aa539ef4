"""Two panels a person would rather look at than read: speedup and rejection rate by row."""

from __future__ import annotations

from pathlib import Path

from viasd_adapt.errors import ViasdError

TIER_COLOURS = {"-": "#7f7f7f", "plain": "#bcbd22", "none": "#1f77b4", "lossless": "#2ca02c", "lossy": "#d62728", "audit": "#9467bd"}


def plot_rows(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Writes one PNG: speedup vs autoregressive (with the analytic bound marked) and rejection rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["framework"] if r["mode"] == "-" else f"{r['framework']}/{r['mode']}" for r in rows]
    colours = [TIER_COLOURS.get(r["mode"], "#333333") for r in rows]
    speedups = [r["speedup_vs_ar"] or 0.0 for r in rows]
    bounds = [r["analytic_bound"] for r in rows]
    rejections = [r["rejection_rate"] for r in rows]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 1.1 * len(rows) + 4), 4.5))
    x = range(len(rows))
    ax1.bar(x, speedups, color=colours)
    ax1.scatter([i for i, b in zip(x, bounds) if b], [b for b in bounds if b], marker="_", s=400, color="black",
                label="analytic bound", zorder=3)
    ax1.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax1.set_ylabel("speedup vs autoregressive (median)")
    ax1.set_title("speedup by row")
    ax1.legend(loc="upper left", fontsize=8)
    ax2.bar(x, [r if r is not None else 0.0 for r in rejections], color=colours)
    for i, r in zip(x, rejections):
        if r is None:
            ax2.text(i, 0.005, "n/a", ha="center", fontsize=7)
    ax2.set_ylabel("rejection rate (median)")
    ax2.set_title("rejection rate by row")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise ViasdError(f"cannot write plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return path
