"""Per-forward costs of drafter, slim and full model, and the analytic speedup bound of a row.

The bound answers "how fast could this row be if nothing but the model forwards cost time?".
With, per generated token, ``d`` drafter passes, ``s`` slim passes and ``f`` full passes (measured
by :mod:`viasd_adapt.bench.measure`), and the median wall time of one forward of each model at the
bench's typical context length:

* ``c_draft``: drafter, 1 new token;
* ``c_slim``: slim verifier, a block of ``gamma + 1`` new tokens;
* ``c_full_block``: full target, a block of ``gamma + 1`` new tokens;
* ``c_full``: full target, 1 new token (one autoregressive step),

the time per token is modelled as ``d * c_draft + s * c_slim + f * c_full_block`` (sequential
frameworks) or ``max(d * c_draft, s * c_slim + f * c_full_block)`` (frameworks that draft while
verifying, e.g. PEARL's parallel mode), and autoregressive decoding costs ``c_full`` per token, so

    bound = c_full / (d * c_draft + s * c_slim + f * c_full_block)

which is the usual per-cycle form ``tau * c_full / (gamma_d * c_draft + n_s * c_slim + n_f *
c_full_block)`` divided through by the cycle count (``tau`` = tokens per cycle). The measured
``speedup_vs_ar`` divided by this bound says how much of the ideal the implementation achieves;
the rest is Python, sampling, gate arithmetic, cache bookkeeping and framework overhead.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from viasd_adapt.runner import CachedRunner


@dataclass(frozen=True)
class ForwardCosts:
    """Median seconds of one forward of each model (see the module docstring)."""

    c_draft: float
    c_slim: float | None
    c_full_block: float
    c_full: float
    context_length: int
    block_length: int

    def to_dict(self) -> dict:
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _ForwardProbe:
    """One model prefilled with ``context``; :meth:`time_once` feeds ``n_new`` tokens after it."""

    def __init__(self, model: nn.Module, context: list[int], n_new: int, cache_factory=None):
        self.runner = CachedRunner(model, cache_factory)
        self.device = next(model.parameters()).device
        self.context = context
        self.block = [context[(i * 7) % len(context)] for i in range(n_new)]
        self.runner.logits_for(context, 1)  # prefill, untimed
        self.runner.logits_for(context + self.block, n_new)  # warm-up

    def time_once(self) -> float:
        _sync(self.device)
        start = time.perf_counter()
        self.runner.logits_for(self.context + self.block, len(self.block))  # crops back to context, feeds block
        _sync(self.device)
        return time.perf_counter() - start


def time_forward(model: nn.Module, context: list[int], n_new: int, repeats: int = 7, cache_factory=None) -> float:
    """Median seconds to feed ``n_new`` tokens after ``context`` tokens already in the KV cache."""
    probe = _ForwardProbe(model, context, n_new, cache_factory)
    return statistics.median(probe.time_once() for _ in range(repeats))


def measure_forward_costs(
    target: nn.Module,
    draft: nn.Module,
    slim=None,
    context: list[int] | None = None,
    gamma: int = 5,
    repeats: int = 15,
) -> ForwardCosts:
    """Times single forwards of drafter, slim verifier (if any) and target on ``context``.

    The four probes are timed round-robin (one forward of each per round), so that load from other
    processes hits them alike; each cost is the median over rounds.
    """
    if not context:
        context = list(range(1, 65))
    block = gamma + 1
    probes = {
        "c_draft": _ForwardProbe(draft, context, 1),
        "c_full_block": _ForwardProbe(target, context, block),
        "c_full": _ForwardProbe(target, context, 1),
    }
    if slim is not None:
        probes["c_slim"] = _ForwardProbe(slim.model, context, block, slim.new_cache)
    samples: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(repeats):
        for name, probe in probes.items():
            samples[name].append(probe.time_once())
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return ForwardCosts(
        c_draft=medians["c_draft"],
        c_slim=medians.get("c_slim"),
        c_full_block=medians["c_full_block"],
        c_full=medians["c_full"],
        context_length=len(context),
        block_length=block,
    )


def analytic_bound(
    costs: ForwardCosts,
    draft_passes_per_token: float,
    slim_passes_per_token: float,
    full_passes_per_token: float,
    overlapped_drafting: bool = False,
) -> float | None:
    """Upper bound on speedup over autoregressive decoding (formula in the module docstring)."""
    c_slim = costs.c_slim or 0.0
    drafting = draft_passes_per_token * costs.c_draft
    verifying = slim_passes_per_token * c_slim + full_passes_per_token * costs.c_full_block
    per_token = max(drafting, verifying) if overlapped_drafting else drafting + verifying
    if per_token <= 0:
        return None
    return costs.c_full / per_token
