"""What ``viasd tune`` says and draws: the verdict in sentences and the Pareto frontiers."""

from __future__ import annotations

from pathlib import Path

from viasd_adapt.config.budget import TIE_MARGIN
from viasd_adapt.core.settings import ADAPTIVE_SUFFIX
from viasd_adapt.io import save_figure
from viasd_adapt.tuning.choose import (TuneResult, ar_full_equivalent, choice_uncertainty, pareto, settings_label,
                                       target_alone_cheapest)
from viasd_adapt.tuning.grid import FAMILIES


#: What tune's report calls each family, as the bench names its rows: the default (adaptive) run by
#: the mode's name, the tier on every cycle with ``-fixed``. tuned.json keeps the family keys it
#: always had (``lossless``, ``viasd``, ``lossless-adaptive``, ``viasd-adaptive``), so old files read.
FAMILY_LABELS = {"lossless": "lossless-fixed", "viasd": "lossy-fixed",
                 "lossless" + ADAPTIVE_SUFFIX: "lossless", "viasd" + ADAPTIVE_SUFFIX: "lossy"}


def family_label(family: str) -> str:
    """The report's name of a tune family (:data:`FAMILY_LABELS`; others as they are)."""
    return FAMILY_LABELS.get(family, family)


def describe(result: TuneResult) -> list[str]:
    """The tuner's verdict in sentences."""
    lines = []
    measured = {p.family for p in result.points}
    best = {family: result.best(family) for family in FAMILIES if family in measured or ADAPTIVE_SUFFIX not in family}
    for family, point in best.items():
        if point is None:
            lines.append(f"{family_label(family)}: no setting within the budget")
            continue
        lines.append(f"{family_label(family)}: best within budget {point.full_equivalent:.3f} full-equivalent passes/token "
                     f"(LL drop {point.ll_drop:+.3f}, regret {point.regret if point.regret is not None else float('nan'):.3f}, "
                     f"overrule {point.overrule if point.overrule is not None else float('nan'):.3f}) "
                     f"with {settings_label(point.settings)}" + (f", mask {point.mask}" if point.mask else ""))
    chosen = result.point_estimate
    viasd, lenient = best["viasd"], best["lenient"]
    written = "that is what is written" if result.pooled is None else "the bootstrap below decides what is written"
    target_alone = target_alone_cheapest(result)
    if target_alone:
        written = "its settings are written, under the choice ar (see the NOTE)"
    if chosen.family.endswith(ADAPTIVE_SUFFIX):
        fixed = best.get(chosen.family[: -len(ADAPTIVE_SUFFIX)])
        gain = 1 - chosen.full_equivalent / fixed.full_equivalent if fixed else None
        lines.append(f"VERDICT: the adaptive tier pays on this pair: {family_label(chosen.family)} ({settings_label(chosen.settings)}) is the "
                     "cheapest setting within the budget; it runs the slim tier on the cycles where it pays"
                     + (f", {gain:.0%} fewer full-equivalent passes than the tier on every cycle" if gain is not None else "")
                     + f", and {written}")
    elif chosen.family == "viasd":
        gain = 1 - viasd.full_equivalent / lenient.full_equivalent if lenient else None
        lines.append("VERDICT: the slim tier pays on this pair: VIA-SD lossy is the cheapest setting within the budget"
                     + (f", {gain:.0%} fewer full-equivalent passes than the best lenient point" if gain is not None else ""))
    elif viasd is not None and viasd.full_equivalent < chosen.full_equivalent:
        gain = 1 - viasd.full_equivalent / chosen.full_equivalent
        lines.append(f"VERDICT: the slim tier does not pay on this pair at this budget: VIA-SD lossy is only {gain:.1%} "
                     f"cheaper than {family_label(chosen.family)} ({settings_label(chosen.settings)}), within the {TIE_MARGIN:.0%} "
                     f"margin of timing noise, so the simpler {family_label(chosen.family)} is preferred, and {written}")
    else:
        lines.append(f"VERDICT: the slim tier does not pay on this pair at this budget; the cheapest setting is "
                     f"{family_label(chosen.family)} ({settings_label(chosen.settings)}), and {written}")
    lines.extend(_uncertainty_lines(result, lines))
    if target_alone:  # against the written drafting setting, which target_alone_cheapest compared
        lines.append(f"NOTE: plain decoding (the target alone, one 1-token pass per token) costs "
                     f"{ar_full_equivalent(result):.3f} full-equivalent passes/token here, less than the cheapest drafting "
                     f"setting ({result.chosen.full_equivalent:.3f}): "
                     "speculative decoding itself does not pay with this drafter on this machine, so tuned.json "
                     "records the choice ar, and `viasd generate --pair` runs the target alone")
    return lines


def _uncertainty_lines(result: TuneResult, lines: list[str]) -> list[str]:
    """The choice's bootstrap over calibration prompts, in a line; an undetermined choice also
    marks the VERDICT line (in place) and says that the simpler setting is what tuned.json records
    (:func:`judged`)."""
    uncertainty = choice_uncertainty(result)
    if uncertainty is None:
        return ["UNCERTAINTY: none can be stated (these points carry no per-prompt sums: an older tune file)"]
    if uncertainty.determined:
        return [f"UNCERTAINTY: the choice is {uncertainty.sentence()}"]
    from viasd_adapt.bench.uncertainty import prompts_words

    for i, line in enumerate(lines):
        if line.startswith("VERDICT: "):
            counted = prompts_words(uncertainty.prompts) + (" (distinct)" if uncertainty.copies else "")
            lines[i] = f"VERDICT (a preview, undetermined at {counted}): " + line[len("VERDICT: "):]
    advice = ""
    if result.pooled is not None:
        advice = (f"; tuned.json records the simpler {uncertainty.recommended}, not the pooled choice "
                  f"{uncertainty.stated}: measure on more calibration prompts (--prompts) to settle it")
    return [f"UNCERTAINTY: the choice is {uncertainty.sentence()}{advice}"]



def plot_frontiers(result: TuneResult, path: str | Path, title: str = "") -> Path:
    """Both Pareto frontiers (VIA-SD lossy and the lenient baseline) with every point and the budget:
    cost against the log-likelihood drop (left) and against the regret (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    styles = {"viasd": ("#d62728", "VIA-SD lossy, tier on every cycle (lossy-fixed)"), "lenient": ("#ff7f0e", "lenient baseline"),
              "sd": ("#1f77b4", "untiered SD"), "lossless": ("#2ca02c", "lossless cascade, tier on every cycle (lossless-fixed)"),
              "viasd" + ADAPTIVE_SUFFIX: ("#ff9896", "VIA-SD lossy (adaptive, the default)"),
              "lossless" + ADAPTIVE_SUFFIX: ("#98df8a", "lossless cascade (adaptive, the default)")}
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
