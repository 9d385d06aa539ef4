"""Measured pass counts priced with forward costs measured elsewhere: the projected verdict.

Pass counts (drafter, slim, full, resumed and one-token passes per token) do not depend on the
hardware; their prices do. On these CPUs a 6-token block pass costs about 1.7 one-token passes; on
a GPU about one. So ``viasd bench --costs FILE`` and ``viasd tune --costs FILE`` also price every
row's (point's) measured pass counts with a *cost model* from another machine, and judge the
verdict again with them. The result is a projection, labelled as one: it assumes the other
machine's drafter acceptance and the tier's decisions are what this run measured (they are:
decisions depend on the models, not the hardware), and that time is spent in forwards only.

A cost file (``viasd_adapt/assets/costs/*.json``, or your own; units are ratios), read and checked
by :class:`viasd_adapt.config.costs.CostFile`:

* ``block_over_single``: a (gamma + 1)-token target pass over a 1-token one (1.09 on an H200 at 7B);
* ``slim_over_block``: a slim pass over a full block pass, measured at skip ratio ``slim_ratio``;
* ``draft_over_single``: a drafter pass over a 1-token target pass (0 for prompt lookup, which
  runs no model; a row that made no drafter pass pays nothing for it anyway).

A mask skipping another share of layers is priced by layers: a pass costs ``o + (1 - o) * f``
of a block pass, where ``f`` is the share of decoder layers it runs and the overhead ``o``
(embeddings, LM head) is solved from the file's own slim measurement. The resumed full pass (q
continuing from the slim verifier's hidden states at its first skipped layer s1) runs layers s1..L.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from viasd_adapt.bench.costs import ForwardCosts, PassCounts, analytic_bound, full_equivalent
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.registry import shipped_dir
from viasd_adapt.config.costs import COST_FORMAT, CostFile, check_cost_ratios
from viasd_adapt.config.mask import RoutingMask


@dataclass(frozen=True)
class CostModel:
    """Forward costs of another machine, as ratios (module docstring)."""

    label: str
    block_over_single: float
    slim_over_block: float | None = None
    slim_ratio: float | None = None
    draft_over_single: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        # The ratios the projection divides into must stay finite (a file is refused by CostFile already).
        check_cost_ratios(self.block_over_single, self.slim_over_block, self.slim_ratio, self.draft_over_single,
                          source=f"cost model {self.label!r}")

    @property
    def overhead(self) -> float:
        """The share of a block pass that does not scale with the layers run (solved from the slim
        measurement; 0 without one)."""
        if self.slim_over_block is None or not self.slim_ratio:
            return 0.0
        return min(max((self.slim_over_block - (1.0 - self.slim_ratio)) / self.slim_ratio, 0.0), 1.0)

    def layer_share_cost(self, share: float) -> float:
        """A pass that runs ``share`` of the decoder layers, in full block passes."""
        return self.overhead + (1.0 - self.overhead) * share

    def forward_costs(self, mask: RoutingMask | None, block_length: int) -> ForwardCosts:
        """:class:`ForwardCosts` in units of one full block pass, for a run with ``mask``."""
        c_slim = c_resume = None
        if mask is not None:
            layers = mask.num_layers
            c_slim = self.layer_share_cost((layers - mask.num_skipped) / layers)
            if mask.first_skipped > 0:
                c_resume = self.layer_share_cost((layers - mask.first_skipped) / layers)
        c_full = 1.0 / self.block_over_single
        return ForwardCosts(c_draft=self.draft_over_single * c_full, c_slim=c_slim, c_resume=c_resume, c_full_block=1.0,
                            c_full=c_full, context_length=0, block_length=block_length)


def load_cost_model(name_or_path: str | Path) -> CostModel:
    """A cost file by path, or by the name of a shipped one (``h200-llama2-7b``, ``h200-llama2-13b``)."""
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        shipped = shipped_dir() / "costs" / f"{name_or_path}.json"
        if not shipped.is_file():
            known = ", ".join(sorted(p.stem for p in (shipped_dir() / "costs").glob("*.json")))
            raise ConfigError(f"--costs {name_or_path}: no such file, nor a shipped cost model (shipped: {known})")
        path = shipped
    costs = CostFile.load(path)
    return CostModel(label=costs.label or path.stem, block_over_single=costs.block_over_single,
                     slim_over_block=costs.slim_over_block, slim_ratio=costs.slim_ratio,
                     draft_over_single=costs.draft_over_single, source=costs.source)


def row_passes(row: dict) -> PassCounts | None:
    """A bench row's pass counts per token (its medians), or None when it kept none."""
    full = row.get("full_passes_per_token")
    if full is None:
        return None
    single = row.get("single_passes_per_token")
    if single is None:  # a report written before one-token passes were told apart: ar's were all single
        from viasd_adapt.bench.verdict import is_target_alone_row

        single = full if is_target_alone_row(row) else 0.0
    return PassCounts(draft=row.get("draft_passes_per_token") or 0.0, slim=row.get("slim_passes_per_token") or 0.0,
                      full=full - single, resumed=row.get("resumed_passes_per_token") or 0.0, single=single)


def project_rows(rows: list[dict], model: CostModel, mask: RoutingMask | None, block_length: int) -> list[dict]:
    """The rows with ``full_equivalent_per_token`` and the analytic speedup over AR re-priced by
    ``model`` (the measured values kept as ``measured_*``)."""
    costs = model.forward_costs(mask, block_length)
    projected = []
    for row in rows:
        passes = row_passes(row)
        if passes is None:
            projected.append(dict(row, measured_full_equivalent_per_token=row.get("full_equivalent_per_token"),
                                  full_equivalent_per_token=None, projected_speedup_vs_ar=None))
            continue
        projected.append(dict(row, measured_full_equivalent_per_token=row.get("full_equivalent_per_token"),
                              full_equivalent_per_token=full_equivalent(costs, passes),
                              projected_speedup_vs_ar=analytic_bound(costs, passes, _overlaps_drafting(row)),
                              per_prompt=repriced_prompt_sums(row.get("per_prompt"), costs)))
    return projected


def _overlaps_drafting(row: dict) -> bool:
    """Whether the row's framework drafts while the target verifies (PEARL): its bound overlaps the two."""
    from viasd_adapt.frameworks.registry import declared

    framework = declared(row.get("framework", ""))
    return framework is not None and framework.overlaps_drafting


def repriced_prompt_sums(per_prompt: dict | None, costs: ForwardCosts) -> dict | None:
    """Per-prompt sums (a bench row's or a tune point's ``per_prompt``) with each prompt's raw pass
    counts priced by ``costs``, so that a repriced verdict carries its own uncertainty; None without
    the raw pass counts. The pass kinds are whatever the sums kept (older tune points have no ``single``)."""
    if not isinstance(per_prompt, dict) or not per_prompt.get("passes"):
        return None
    passes = per_prompt["passes"]
    cost = [full_equivalent(costs, PassCounts(**{kind: values[i] for kind, values in passes.items()}))
            for i in range(len(per_prompt["tokens"]))]
    return dict(per_prompt, cost=cost)


def project_costs_per_mask(model: CostModel, masks: dict[str | None, RoutingMask | None], block_length: int
                           ) -> dict[str | None, ForwardCosts]:
    """:meth:`CostModel.forward_costs` for each mask of a tune sweep (None: the runs without one)."""
    return {name: model.forward_costs(mask, block_length) for name, mask in masks.items()}


PROJECTION_COLUMNS = (
    ("row", None, None),
    ("feq/tok measured", "measured_full_equivalent_per_token", "{:.3f}"),
    ("feq/tok projected", "full_equivalent_per_token", "{:.3f}"),
    ("x_ar projected", "projected_speedup_vs_ar", "{:.2f}"),
    ("LL_drop", "ll_drop", "{:+.3f}"),
    ("regret", "regret", "{:.3f}"),
)


def projection_difference(measured_row: dict, projected_row: dict, measured: ForwardCosts, projected: ForwardCosts) -> str | None:
    """Where the projected verdict uses another row than the measured one: one sentence naming the pass
    kind whose price makes the difference (the kind whose change of price moves the two rows' cost gap
    most, from the rows' own pass counts). None when either row has no pass counts."""
    from viasd_adapt.bench.prices import PASS_KINDS, pass_vector, unit_prices
    from viasd_adapt.bench.verdict import is_baseline_row

    a, b = row_passes(measured_row), row_passes(projected_row)
    if a is None or b is None:
        return None

    def prices(costs: ForwardCosts):
        seconds = [costs.c_draft, costs.c_slim or 0.0, costs.c_full_block,
                   costs.c_resume if costs.c_resume is not None else costs.c_full_block, costs.c_full]
        return unit_prices(np.array([seconds], dtype=float))[0]

    gap = pass_vector(a) - pass_vector(b)
    before, after = prices(measured), prices(projected)
    shift = gap * (after - before)
    k = int(np.argmax(np.abs(shift)))
    if shift[k] == 0:  # no price moved the two rows' gap: the passes alone differ
        return None
    names = {"draft": "drafter", "slim": "slim", "full": "full block", "resumed": "resumed", "single": "1-token"}
    label = lambda row: row["framework"] if is_baseline_row(row) else row["mode"]  # noqa: E731
    kind = PASS_KINDS[k]
    return (f"The projection uses {label(projected_row)} where the measurement uses {label(measured_row)} because of "
            f"the {names[kind]} pass's price: {after[k]:.2f} of a full block pass projected against {before[k]:.2f} "
            f"measured, and {label(measured_row)} runs {pass_vector(a)[k]:.2f} {names[kind]} passes per token against "
            f"{label(projected_row)}'s {pass_vector(b)[k]:.2f}.")


__all__ = ["COST_FORMAT", "CostModel", "PROJECTION_COLUMNS", "load_cost_model", "project_costs_per_mask", "project_rows", "projection_difference",
           "repriced_prompt_sums", "row_passes"]
