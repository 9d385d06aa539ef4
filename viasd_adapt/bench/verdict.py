"""The verdict: per framework, the cheapest row within the fidelity budget, and how sure that is.

Every speed claim is weighed against the simple baselines (the target alone, stock prompt lookup,
untiered SD, lenient) at the same fidelity; this turns a bench's rows into that sentence for
``viasd bench`` and ``viasd demo``, with the paired bootstrap of :mod:`viasd_adapt.bench.uncertainty`.
"""

from __future__ import annotations


# The budget and the recommendation rule live one layer down (viasd_adapt.config.budget), where the
# verdicts' bootstrap (viasd_adapt.bench.uncertainty) can use them too; they are importable from here as before.
from viasd_adapt.config.budget import (
    BASELINE_FRAMEWORKS,
    DEFAULT_MAX_LL_DROP,
    DEFAULT_MAX_REGRET,
    SIMPLE_MODES,
    TIE_MARGIN,
    TIER_MODES,
    Budget,
    recommend,
)
from viasd_adapt.core.settings import ADAPTIVE_MODES, FIXED_SUFFIX

#: the fixed-tier rows (:mod:`viasd_adapt.bench.run`): weighed like any tier row
FIXED_ROWS = tuple(mode.value + FIXED_SUFFIX for mode in ADAPTIVE_MODES)
#: the adaptive rows: the bare lossless and lossy, what a default run costs
ADAPTIVE_ROWS = tuple(mode.value for mode in ADAPTIVE_MODES)
#: the rows a framework's verdict weighs (with the baselines ar and lookup)
CANDIDATE_MODES = ("none", "lenient", "lossless", "lossy") + FIXED_ROWS
#: the rows whose output is exactly the target's (the adaptive tier keeps lossless exact)
EXACT_MODES = ("none", "lossless", "lossless" + FIXED_SUFFIX)


def _mode_label(row: dict) -> str:
    return row["framework"] if _is_baseline(row) else row["mode"]


def _is_baseline(row: dict) -> bool:
    """The target alone or stock prompt lookup: exact, simple, a candidate in every framework's verdict."""
    return row["framework"] in BASELINE_FRAMEWORKS


def _row_within(row: dict, budget: Budget) -> bool:
    """A bench row under the budget: ``ar``, ``none`` and lossless (adaptive or not) are exact; a row with no
    regret column (an older results file) is judged on what it has."""
    exact = _is_baseline(row) or row["mode"] in EXACT_MODES
    return budget.admits_values(exact=exact, ll_drop=row.get("ll_drop"), overrule=row.get("overrule_rate"),
                                regret=row.get("regret"), unmeasured_ok=("regret",))


def verdict(rows: list[dict], max_ll_drop: float = DEFAULT_MAX_LL_DROP, max_regret: float = DEFAULT_MAX_REGRET,
            max_overrule: float | None = None, budget: Budget | None = None) -> list[str]:
    """Per framework: the cheapest row (full-equivalent passes per token) within the fidelity
    budget (:class:`Budget`: LL drop, regret and, when set, the overrule rate), among plain
    autoregressive decoding (the ``ar`` row, when the bench ran it), untiered SD (none), lenient,
    lossless and lossy as a default run (the adaptive tier) and with the tier on every cycle
    (``lossless-fixed``, ``lossy-fixed``), and whether the tier won. AR is a candidate because speculative decoding
    itself may not pay: on a CPU a block pass costs well over one single-token pass, and a weak
    drafter may not make up for it.

    Rows that carry their per-prompt sums (``per_prompt``, kept by the bench since they existed)
    get a paired bootstrap over prompts (:mod:`viasd_adapt.bench.uncertainty`): each line says whether
    the recommendation is determined at N prompts; where it is not, the line recommends the simpler
    setting instead of the point estimate's."""
    budget = budget or Budget(max_ll_drop, max_overrule, max_regret)
    lines = []
    baselines = [r for r in rows if _is_baseline(r) and r.get("full_equivalent_per_token") is not None]
    for framework in dict.fromkeys(r["framework"] for r in rows if not _is_baseline(r)):
        candidates = baselines + [
            r for r in rows
            if r["framework"] == framework and r["mode"] in CANDIDATE_MODES
            and r.get("full_equivalent_per_token") is not None
        ]
        within = [r for r in candidates if _row_within(r, budget)]
        if not within:
            continue
        cheapest, use = recommend(within, cost=lambda r: r["full_equivalent_per_token"],
                                  is_simple=lambda r: _is_baseline(r) or r["mode"] in SIMPLE_MODES)
        described = ", ".join(
            f"{_mode_label(r)} {r['full_equivalent_per_token']:.3f}"
            + (f" (LL drop {r['ll_drop']:+.3f})" if r.get("ll_drop") is not None
               and r["mode"] in ("lenient", "lossy", "lossy" + FIXED_SUFFIX) else "")
            for r in candidates
        )
        uncertainty = _uncertainty(candidates, use, budget)
        if uncertainty is not None and not uncertainty.determined and uncertainty.recommended != _mode_label(use):
            # the point estimate is not to be trusted: say so instead of its sentence, and name the simpler row
            judgement = (f"On these prompts pooled, {_mode_label(use)} would be the recommendation, but it is "
                         f"{uncertainty.sentence()}.")
        else:
            judgement = f"{_judgement(cheapest, use)} {_uncertainty_words(uncertainty)}."
        lines.append(
            f"{framework}: cheapest within {_budget_words(budget)} is "
            f"{_mode_label(cheapest)} ({cheapest['full_equivalent_per_token']:.3f} full-equivalent passes/token; "
            f"all: {described}). " + judgement
        )
    return lines


def _judgement(cheapest: dict, use: dict) -> str:
    """The verdict's sentence on the point estimate (every prompt pooled)."""
    if use is not cheapest:
        gain = 1 - cheapest["full_equivalent_per_token"] / use["full_equivalent_per_token"]
        return (f"{_mode_label(cheapest)} is only {gain:.1%} cheaper than {_mode_label(use)}, within the "
                f"{TIE_MARGIN:.0%} margin of timing noise: the slim tier does not pay here: use {_mode_label(use)}.")
    if use["framework"] == "ar":
        return ("Speculative decoding itself does not pay here (every drafting row costs more than plain "
                "decoding), so neither does the slim tier: use ar (the target alone).")
    if use["framework"] == "lookup":
        return ("Stock prompt lookup (no drafter model, no tier) is the cheapest here, so the slim tier does not pay: "
                "use lookup (generate(prompt_lookup_num_tokens=...)).")
    if use["mode"] in ADAPTIVE_ROWS:
        return ("The default (adaptive) tier is the cheapest here (the slim tier on the cycles where it pays, "
                "untiered verification on the others).")
    if use["mode"] in TIER_MODES or use["mode"] in FIXED_ROWS:
        return "The slim tier pays here."
    return f"The slim tier does not pay here: use {use['mode']}."


def _uncertainty(candidates: list[dict], use: dict, budget: Budget):
    """The paired bootstrap over prompts of one framework's verdict (:mod:`viasd_adapt.bench.uncertainty`);
    None when a row carries no per-prompt sums (a report written before they were kept)."""
    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, bootstrap_verdict, sums_from_json

    sums = [sums_from_json(r.get("per_prompt")) for r in candidates]
    reference = next((s for r, s in zip(candidates, sums) if r["framework"] == "ar"), None)
    if any(s is None for s in sums) or len({len(s) for s in sums}) != 1:
        return None
    pool = [Candidate(_mode_label(r), s, exact=_is_baseline(r) or r["mode"] in EXACT_MODES,
                      simple=_is_baseline(r) or r["mode"] in SIMPLE_MODES) for r, s in zip(candidates, sums)]
    if reference is None:  # no ar row: the drop is measured from untiered SD, which is exact
        reference = next((s for r, s in zip(candidates, sums) if r["mode"] == "none"), None)
    reference = (PromptSums(reference.tokens, reference.cost, reference.log_likelihood, keys=reference.keys)
                 if reference is not None else None)
    return bootstrap_verdict(pool, budget, reference, unmeasured_ok=("regret",), stated=_mode_label(use))


def _uncertainty_words(uncertainty) -> str:
    """The bootstrap's clause after the point sentence (capitalised), or why there is none."""
    if uncertainty is None:
        return "No uncertainty can be stated (these rows carry no per-prompt sums: an older report)"
    sentence = uncertainty.sentence()
    return sentence[0].upper() + sentence[1:]


def _budget_words(budget: Budget) -> str:
    """The budget as the verdict states it ("an LL drop of 0.02 and a regret of 0.02 nats/token")."""
    words = []
    if budget.max_ll_drop is not None:
        words.append(f"an LL drop of {budget.max_ll_drop}")
    if budget.max_regret is not None:
        words.append(f"a regret of {budget.max_regret} nats/token")
    if budget.max_overrule is not None:
        words.append(f"an overrule rate of {budget.max_overrule}")
    return " and ".join(words)


__all__ = ["verdict"]
