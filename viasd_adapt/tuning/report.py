"""What ``viasd tune`` says and draws: the verdict in sentences and the Pareto frontiers."""

from __future__ import annotations

from pathlib import Path

from viasd_adapt.io import save_figure
from viasd_adapt.tuning.choose import TuneResult, pareto, settings_label, target_alone_cheapest
from viasd_adapt.tuning.grid import FAMILIES


#: The families of the adaptive tier: reported only when the sweep measured them (their twins of the
#: best fixed points exist only where a fixed point does).
ADAPTIVE_FAMILIES = ("lossless", "lossy")


def family_label(family: str) -> str:
    """The report's name of a tune family: the family itself, since tuned.json, the bench's rows and
    ``--mode`` share one vocabulary (:data:`~viasd_adapt.tuning.grid.FAMILIES`)."""
    return family


def describe(result: TuneResult) -> list[str]:
    """The tuner's verdict in sentences."""
    lines = []
    measured = {p.family for p in result.points}
    best = {family: result.best(family) for family in FAMILIES if family in measured or family not in ADAPTIVE_FAMILIES}
    for family, point in best.items():
        if point is None:
            lines.append(f"{family_label(family)}: no setting within the budget")
            continue
        lines.append(f"{family_label(family)}: best within budget {point.full_equivalent:.3f} full-equivalent passes/token "
                     f"(LL drop {point.ll_drop:+.3f}, regret {point.regret if point.regret is not None else float('nan'):.3f}, "
                     f"overrule {point.overrule if point.overrule is not None else float('nan'):.3f}) "
                     f"with {settings_label(point.settings)}" + (f", mask {point.mask}" if point.mask else ""))
    if result.price_list is not None:
        from viasd_adapt.bench.prices import format_price_list

        lines.append(format_price_list(result.price_list))
    lines.append(_verdict_line(result))
    lines.extend(_uncertainty_lines(result))
    lines.extend(_busy_lines(result))
    if target_alone_cheapest(result) and result.decision is not None:  # the same comparison as the choice
        lines.append(f"NOTE: plain decoding (the target alone, one 1-token pass per token) is written: "
                     f"{result.decision.reason()}. Speculative decoding itself does not pay with this drafter on this "
                     "machine, so tuned.json records the choice ar, and `viasd generate --pair` runs the target alone")
    return lines


def _verdict_line(result: TuneResult) -> str:
    """The VERDICT line: what is written and why, from the exact-first ladder's own comparison
    (:mod:`viasd_adapt.bench.exact_first`), so the words cannot contradict the figures they quote."""
    chosen = result.chosen
    family, settings = family_label(chosen.family), settings_label(chosen.settings)
    label = family if settings == family else f"{family} ({settings})"  # "none", not "none (none)"
    decision = result.decision if result.decision is not None and not target_alone_cheapest(result) else result.drafting
    why = decision.reason() if decision is not None else "nothing else is within the budget"
    if chosen.family in ADAPTIVE_FAMILIES:
        head = "the adaptive tier pays on this pair"
    elif chosen.family == "lossy-fixed":
        head = "the slim tier pays on this pair: VIA-SD lossy is written"
    elif chosen.family == "lossless-fixed":
        head = "the exact slim tier pays on this pair"
    else:
        head = "the slim tier does not pay on this pair at this budget"
    return f"VERDICT: {head}: {label} is the drafting setting written, because {why}"


def _uncertainty_lines(result: TuneResult) -> list[str]:
    """How much noise the choice had to beat: the prompts and resamples behind it, and whether a
    cheaper setting was refused on noise alone."""
    decision = result.drafting
    if decision is None or not decision.replicates:
        return ["UNCERTAINTY: none can be stated (these points carry no per-prompt sums: an older tune file); "
                "the margin alone decided"]
    state = ("so the simpler setting is written" if decision.within_noise
             else "no cheaper setting was refused on noise alone")
    return [f"UNCERTAINTY: the choice is {decision.evidence()}; {state}"]


def _busy_lines(result: TuneResult) -> list[str]:
    """A line when the price list's spread is wide (:func:`~viasd_adapt.bench.prices.spread_line`)."""
    from viasd_adapt.bench.prices import spread_line

    line = spread_line(result.price_list)
    return [line] if line is not None else []


def plot_frontiers(result: TuneResult, path: str | Path, title: str = "") -> Path:
    """Both Pareto frontiers (VIA-SD lossy and the lenient baseline) with every point and the budget:
    cost against the log-likelihood drop (left) and against the regret (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    styles = {"lossy-fixed": ("#d62728", "VIA-SD lossy, tier on every cycle (lossy-fixed)"),
              "lenient": ("#ff7f0e", "lenient baseline"), "none": ("#1f77b4", "untiered SD (none)"),
              "lossless-fixed": ("#2ca02c", "lossless cascade, tier on every cycle (lossless-fixed)"),
              "lossy": ("#ff9896", "VIA-SD lossy (adaptive, the default)"),
              "lossless": ("#98df8a", "lossless cascade (adaptive, the default)")}
    panels = ((axes[0], "ll_drop", result.budget.max_ll_drop, "target log-likelihood drop per token"),
              (axes[1], "regret", result.budget.max_regret, "regret per token (nats, teacher-forced)"))
    for ax, key, limit, label in panels:
        for family, (colour, name) in styles.items():
            members = [p for p in result.points if p.family == family and getattr(p, key) is not None]
            if not members:
                continue
            ax.scatter([p.full_equivalent for p in members], [getattr(p, key) for p in members], color=colour,
                       alpha=0.35, s=18)
            front = pareto(members, key)
            ax.plot([p.full_equivalent for p in front], [getattr(p, key) for p in front], "-o", color=colour, label=name,
                    markersize=4)
        if limit is not None:
            ax.axhline(limit, color="black", linestyle="--", linewidth=0.8, label="fidelity budget")
        ax.scatter([result.chosen.full_equivalent], [getattr(result.chosen, key)], marker="*", s=250, color="gold",
                   edgecolor="black", zorder=5, label=f"chosen: {family_label(result.chosen.family)}")
        ax.set_xlabel("full-equivalent passes per token (lower is cheaper)")
        ax.set_ylabel(f"{label} (lower is more faithful)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "viasd tune: cost vs fidelity (every setting measured; lines: Pareto frontiers)", fontsize=9)
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)



__all__ = ["describe", "plot_frontiers"]
