"""The verdict: per framework, the cheapest row within the fidelity budget, and how sure that is.

Every speed claim is weighed against the simple baselines (the target alone, stock prompt lookup,
untiered SD, lenient) at the same fidelity; this turns a bench's rows into that sentence for
``viasd bench`` and ``viasd demo``, with the paired bootstrap of :mod:`viasd_adapt.bench.uncertainty`.
"""

from __future__ import annotations

import numpy as np

from viasd_adapt.bench.exact_first import AR_RUNG, EXACT_RUNG, EXACT_TIER_RUNG, LENIENT_RUNG, LOSSY_TIER_RUNG, Decision, decide
from viasd_adapt.bench.prices import PriceList, spread_line

# The budget lives one layer down (viasd_adapt.config.budget), where the verdicts' bootstrap
# (viasd_adapt.bench.uncertainty) can use it too; the names are importable from here as before.
from viasd_adapt.config.budget import (
    DEFAULT_MAX_LL_DROP,
    DEFAULT_MAX_REGRET,
    SIMPLE_MODES,
    TIE_MARGIN,  # noqa: F401 (importable from here)
    TIER_MODES,
    Budget,
)
from viasd_adapt.core.settings import ADAPTIVE_MODES, FIXED_SUFFIX
from viasd_adapt.frameworks.registry import declared

#: the fixed-tier rows (:mod:`viasd_adapt.bench.run`): weighed like any tier row
FIXED_ROWS = tuple(mode.value + FIXED_SUFFIX for mode in ADAPTIVE_MODES)
#: the adaptive rows: the bare lossless and lossy, what a default run costs
ADAPTIVE_ROWS = tuple(mode.value for mode in ADAPTIVE_MODES)
#: the rows a framework's verdict weighs (with the baselines ar and lookup)
CANDIDATE_MODES = ("none", "lenient", "lossless", "lossy") + FIXED_ROWS
#: the rows whose output is exactly the target's (the adaptive tier keeps lossless exact)
EXACT_MODES = ("none", "lossless", "lossless" + FIXED_SUFFIX)


def _mode_label(row: dict) -> str:
    return row["framework"] if is_baseline_row(row) else row["mode"]


def is_baseline_row(row: dict) -> bool:
    """A baseline's row (the target alone, stock prompt lookup: ``Framework.is_baseline``): exact,
    simple, a candidate in every framework's verdict. A framework no longer registered is not one."""
    framework = declared(row["framework"])
    return framework is not None and framework.is_baseline


def is_target_alone_row(row: dict) -> bool:
    """A row of the target alone (``Framework.runs_target_alone``): one target pass per token."""
    framework = declared(row["framework"])
    return framework is not None and framework.runs_target_alone



def _row_within(row: dict, budget: Budget) -> bool:
    """A bench row under the budget: ``ar``, ``none`` and lossless (adaptive or not) are exact; a row with no
    regret column (an older results file) is judged on what it has."""
    exact = is_baseline_row(row) or row["mode"] in EXACT_MODES
    return budget.admits_values(exact=exact, ll_drop=row.get("ll_drop"), overrule=row.get("overrule_rate"),
                                regret=row.get("regret"), unmeasured_ok=("regret",))


#: The exact-first ladder's rung of each row a verdict weighs (:mod:`viasd_adapt.bench.exact_first`).
ROW_RUNGS = {"none": EXACT_RUNG, "lossless": EXACT_TIER_RUNG, "lossless" + FIXED_SUFFIX: EXACT_TIER_RUNG,
             "lenient": LENIENT_RUNG, "lossy": LOSSY_TIER_RUNG, "lossy" + FIXED_SUFFIX: LOSSY_TIER_RUNG}


def _rung(row: dict) -> int:
    if is_target_alone_row(row):
        return AR_RUNG
    return EXACT_RUNG if is_baseline_row(row) else ROW_RUNGS[row["mode"]]


def verdict(rows: list[dict], max_ll_drop: float = DEFAULT_MAX_LL_DROP, max_regret: float = DEFAULT_MAX_REGRET,
            max_overrule: float | None = None, budget: Budget | None = None, prices: PriceList | None = None) -> list[str]:
    """Per framework: the cheapest row (full-equivalent passes per token) within the fidelity
    budget (:class:`Budget`: LL drop, regret and, when set, the overrule rate), among plain
    autoregressive decoding (the ``ar`` row, when the bench ran it), stock prompt lookup, untiered
    SD (none), lenient, lossless and lossy as a default run (the adaptive tier) and with the tier on
    every cycle (``lossless-fixed``, ``lossy-fixed``), and the row to use: the exact-first ladder's
    choice (:mod:`viasd_adapt.bench.exact_first`), the same rule ``viasd tune`` writes by. AR is a
    candidate because speculative decoding itself may not pay: on a CPU a block pass costs well over
    one single-token pass, and a weak drafter may not make up for it.

    Rows that carry their per-prompt sums (``per_prompt``) are resampled over prompts and, with the
    run's ``prices``, over the price list's rounds too; the sentence quotes the comparison that
    decided, and says "undetermined" where a cheaper row was refused on noise alone."""
    budget = budget or Budget(max_ll_drop, max_overrule, max_regret)
    lines = []
    for framework, (candidates, decision, use) in decisions(rows, budget, prices).items():
        cheapest = min((r for r in candidates if _row_within(r, budget)), key=lambda r: r["full_equivalent_per_token"])
        described = ", ".join(
            f"{_mode_label(r)} {r['full_equivalent_per_token']:.3f}"
            + (f" (LL drop {r['ll_drop']:+.3f})" if r.get("ll_drop") is not None
               and r["mode"] in ("lenient", "lossy", "lossy" + FIXED_SUFFIX) else "")
            for r in candidates
        )
        lines.append(
            f"{framework}: cheapest within {_budget_words(budget)} is "
            f"{_mode_label(cheapest)} ({cheapest['full_equivalent_per_token']:.3f} full-equivalent passes/token; "
            f"all: {described}). {_judgement(use)} {_evidence_words(decision)}."
        )
    busy = spread_line(prices) if lines else None
    return lines + ([busy] if busy is not None else [])


def decisions(rows: list[dict], budget: Budget, prices: PriceList | None = None) -> dict[str, tuple[list[dict], Decision, dict]]:
    """Per framework: its candidate rows (with the baselines), the exact-first decision, and the row to use."""
    out = {}
    baselines = [r for r in rows if is_baseline_row(r) and r.get("full_equivalent_per_token") is not None]
    for framework in dict.fromkeys(r["framework"] for r in rows if not is_baseline_row(r)):
        candidates = baselines + [
            r for r in rows
            if r["framework"] == framework and r["mode"] in CANDIDATE_MODES
            and r.get("full_equivalent_per_token") is not None
        ]
        if not any(_row_within(r, budget) for r in candidates):
            continue
        decision = _decision(candidates, budget, prices)
        if decision is not None:
            out[framework] = (candidates, decision, next(r for r in candidates if _mode_label(r) == decision.chosen))
    return out


def _judgement(use: dict) -> str:
    """What the row to use means, in a sentence."""
    if is_baseline_row(use):  # each baseline says what using it means (the registry's ``recommendation``)
        framework = declared(use["framework"])
        return framework.recommendation or (f"The baseline {framework.name} is the row to use, so the slim tier "
                                            f"does not pay: use {framework.name}.")
    if use["mode"] in ADAPTIVE_ROWS:
        return (f"The default (adaptive) tier pays here: use {use['mode']} (the slim tier on the cycles where it pays, "
                "untiered verification on the others).")
    if use["mode"] in TIER_MODES or use["mode"] in FIXED_ROWS:
        return f"The slim tier pays here: use {use['mode']}."
    return f"The slim tier does not pay here: use {use['mode']}."


def _decision(candidates: list[dict], budget: Budget, prices: PriceList | None) -> Decision | None:
    """The exact-first ladder over one framework's rows: resampled over prompts (and the price list's
    rounds) where every row carries its per-prompt sums, else on the pooled costs alone."""
    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, Resampled, resample, sums_from_json

    names = [_mode_label(r) for r in candidates]
    exact = [is_baseline_row(r) or r["mode"] in EXACT_MODES for r in candidates]
    rungs = [_rung(r) for r in candidates]
    sums = [sums_from_json(r.get("per_prompt")) for r in candidates]
    if any(s is None for s in sums) or len({len(s) for s in sums}) != 1:
        cost = np.array([[r["full_equivalent_per_token"] for r in candidates]], dtype=float)
        within = np.array([[_row_within(r, budget) for r in candidates]])
        pool = [Candidate(n, PromptSums([1.0], [c]), e, False) for n, c, e in zip(names, cost[0], exact)]
        return decide(Resampled(names, cost, within, 0, 0, pool, False), rungs)
    reference = next((s for r, s in zip(candidates, sums) if is_target_alone_row(r)), None)
    if reference is None:  # no ar row: the drop is measured from untiered SD, which is exact
        reference = next((s for r, s in zip(candidates, sums) if r["mode"] == "none"), None)
    reference = (PromptSums(reference.tokens, reference.cost, reference.log_likelihood, keys=reference.keys)
                 if reference is not None else None)
    pool = [Candidate(n, s, exact=e, simple=is_baseline_row(r) or r["mode"] in SIMPLE_MODES)
            for n, s, e, r in zip(names, sums, exact, candidates)]
    vectors = [prices.vectors(prices.masks[0] if prices.masks else None)] * len(pool) if prices is not None else None
    return decide(resample(pool, budget, reference, unmeasured_ok=("regret",), price_vectors=vectors), rungs)


def _evidence_words(decision: Decision) -> str:
    """The decision's evidence (determined or not, at N prompts) and the comparison that decided."""
    if not decision.replicates:
        return ("No uncertainty can be stated (these rows carry no per-prompt sums: an older report); "
                f"{decision.reason()}")
    evidence = decision.evidence()
    return f"{evidence[0].upper()}{evidence[1:]}: {decision.reason()}"


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


__all__ = ["decisions", "is_baseline_row", "is_target_alone_row", "verdict"]
