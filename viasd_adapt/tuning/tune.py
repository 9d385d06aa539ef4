"""``viasd tune``: the cheapest setting that meets a fidelity budget, VIA-SD and the baselines alike.

For one pair, every candidate runs the same speculative loop (:mod:`viasd_adapt.engine`, the loop
the HF adapter's tiered modes run) on calibration prompts kept apart from the bench's:

* untiered lossless SD (mode ``none``) and the lossless cascade (exact by construction);
* the lenient baseline for each tolerance ``a``;
* lossy VIA-SD for each routing mask (one DIMR mask per skip ratio r, reused or searched), each
  ``alpha1`` and ``alpha2``, and each greedy gate reading;
* the adaptive tier (:mod:`viasd_adapt.core.adaptive`; off with ``adaptive=False``): for each mask,
  the adaptive twin of the lossless cascade and of the cheapest lossy point within the budget
  (families ``lossless`` and ``lossy``; the fixed ones are ``lossless-fixed`` and ``lossy-fixed``, the
  names the bench's rows and ``--mode`` use). They are measured after the fixed points,
  starting from those points as a ``tuned.json`` would give them (its prices and priors,
  :mod:`viasd_adapt.engine.priors`), so they run as they will run from the written file. The fixed
  families run the tier on every cycle (``adaptive=False``, recorded so in tuned.json).

Each candidate gets a **cost**, full-equivalent passes per token (:mod:`viasd_adapt.bench.costs`,
per-forward costs measured once per mask), and a **fidelity**: the target's log-likelihood drop per
token from its own greedy output on the same prompts, and the overrule rate (greedy: the share of
tokens that are not the target's argmax given their prefix, exactly the audit's greedy overrule;
sampling: the audit run in shadow). The chosen setting is the cheapest within the budget; when
that is the lenient baseline or plain SD the tuner says so and writes that choice. Both Pareto
frontiers (cost vs log-likelihood drop) go into one PNG.

The sweep is four jobs, one module each: :mod:`~viasd_adapt.tuning.grid` (what is swept, and
:class:`TuneConfig`), :mod:`~viasd_adapt.tuning.measure` (:func:`tune`: running the candidates),
:mod:`~viasd_adapt.tuning.choose` (the points, the choice, the artifact) and
:mod:`~viasd_adapt.tuning.report` (sentences and plots). This module gathers their names.
"""

from __future__ import annotations

from viasd_adapt.config.budget import Budget
from viasd_adapt.tuning.choose import (Point, TuneResult, adaptive_candidates, ar_full_equivalent, artifact_of,
                                       choice_uncertainty, choose,
                                       drafter_record, judged, load_result, pareto, point_names, portable_name, projected,
                                       settings_label)
from viasd_adapt.tuning.grid import (FAMILIES, MEASURED_ON, TIER_FAMILIES, TuneConfig, TuneGrid, _search,  # noqa: F401
                                     fixed_candidates, masks_for_ratios)
from viasd_adapt.tuning.measure import Sweep, mask_costs, prompt_sums, tune
from viasd_adapt.tuning.report import describe, family_label, plot_frontiers

#: The older private names (tests reach for them).
_adaptive_candidates = adaptive_candidates

__all__ = ["Budget", "FAMILIES", "MEASURED_ON", "Point", "TIER_FAMILIES", "TuneConfig", "TuneGrid", "TuneResult", "Sweep",
           "ar_full_equivalent", "artifact_of", "choice_uncertainty", "choose", "describe", "drafter_record", "family_label", "judged",
           "load_result", "mask_costs", "masks_for_ratios", "fixed_candidates", "pareto", "plot_frontiers", "point_names",
           "portable_name", "projected", "prompt_sums", "settings_label", "tune"]
