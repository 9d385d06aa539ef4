"""Per-forward costs, full-equivalent passes per token, and the analytic speedup bound.

Counting passes is not enough to compare rows: a slim pass, a drafter pass, a resumed full pass
(q starting at the slim verifier's first skipped layer, :mod:`viasd_adapt.routing.shared`) and a
one-token autoregressive pass all cost different amounts. So every speed claim is made in
**full-equivalent passes per token**: each pass priced by its median measured wall time, in units
of one full target pass over a block of ``gamma + 1`` tokens::

    feq = (d * c_draft + s * c_slim + (f - r) * c_full_block + r * c_resume + a * c_full) / c_full_block

per generated token, with ``d``, ``s``, ``f``, ``r`` the drafter, slim, full and resumed-full passes
of the row's :class:`~viasd_adapt.core.metrics.TierMetrics` (or, for a row without viasd-adapt, of
the bench's forward hooks), and ``a`` the target passes that fed **one** new token. Each pass is
priced by what it ran: an autoregressive step, or a prompt-lookup step that found no n-gram to
propose, is a one-token pass in every framework (``c_full``), not a block pass; ``f`` counts the
others (draft blocks, prompts). Costs are measured in the same run as the rows, so rows compare
across machines.

The analytic bound answers "how fast could this row be if nothing but the forwards cost time?":
``bound = c_full / (per-token time)``, where the per-token time is the numerator above (or, for
frameworks that draft while verifying, ``max(drafting, verifying)``). A row's measured speedup over
autoregressive decoding divided by its bound is the share of the ideal the implementation reaches.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from viasd_adapt.routing.shared import SharedPrefixRunners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.routing.runner import CachedRunner


@dataclass(frozen=True)
class ForwardCosts:
    """Median seconds of one forward of each kind (module docstring).

    ``c_slim`` and ``c_resume`` are None without a slim verifier; ``c_resume`` is None when the
    mask shares no prefix (s1 = 0).
    """

    c_draft: float
    c_slim: float | None
    c_resume: float | None
    c_full_block: float
    c_full: float
    context_length: int
    block_length: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PassCounts:
    """Passes per generated token of one row."""

    draft: float = 0.0
    slim: float = 0.0
    full: float = 0.0  # every full-target pass over a block, resumed ones included
    resumed: float = 0.0
    single: float = 0.0  # target passes that fed one new token (autoregressive steps, lookups with no match)

    @classmethod
    def of_metrics(cls, metrics, tokens: int, single_passes: int = 0) -> "PassCounts":
        """Per token, from a row's :class:`~viasd_adapt.core.metrics.TierMetrics`. ``single_passes``:
        how many of its full passes fed the target one new token (the metrics do not know; the
        bench's meter counts them, :class:`~viasd_adapt.bench.measure.RunMeasure`); they are priced
        as one-token passes. A resumed pass is never one of them (it runs through a view)."""
        if not tokens:
            return cls()
        single = max(0, min(single_passes, metrics.full_passes - metrics.resumed_full_passes))
        return cls(metrics.draft_passes / tokens, metrics.slim_passes / tokens, (metrics.full_passes - single) / tokens,
                   metrics.resumed_full_passes / tokens, single / tokens)

    @classmethod
    def of_forwards(cls, full_passes: int, single_passes: int, draft_passes: int, tokens: int) -> "PassCounts":
        """Per token, from forwards counted by hooks (a row without metrics of its own: ``ar``, a
        stock framework): the target's one-token forwards priced as such, its others as blocks."""
        if not tokens:
            return cls()
        single = max(0, min(single_passes, full_passes))
        return cls(draft=draft_passes / tokens, full=(full_passes - single) / tokens, single=single / tokens)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


class _Probe:
    """One model's runner prefilled with ``context``; each call feeds ``n_new`` tokens after it.

    ``runner`` is a :class:`~viasd_adapt.routing.runner.CachedRunner` (decoder-only) or a
    :class:`~viasd_adapt.routing.seq2seq.Seq2SeqRunner` (an encoder-decoder model's decoder, against an
    encoder output computed once): either way a timed call is one decoder pass."""

    def __init__(self, runner, device: torch.device, context: list[int], n_new: int):
        self.runner = runner
        self.device = device
        self.context = context
        self.block = [context[(i * 7) % len(context)] for i in range(n_new)]
        self.runner.logits_for(context, 1)
        self.runner.logits_for(context + self.block, n_new)  # warm-up

    def __call__(self) -> float:
        return _timed(lambda: self.runner.logits_for(self.context + self.block, len(self.block)), self.device)


class _SharedProbe:
    """The shared-prefix runners: a slim pass over a block, then q resuming over the same block.

    Two blocks alternate, so each timed pass feeds fresh tokens after the same context.
    """

    def __init__(self, target: nn.Module, slim: SlimVerifier, context: list[int], n_new: int):
        self.runners = SharedPrefixRunners(target, slim)
        self.device = next(target.parameters()).device
        self.context = context
        self.blocks = [[context[(i * k) % len(context)] for i in range(n_new)] for k in (7, 11)]
        self.turn = 0
        self.runners.full_logits(context, 1)
        self.slim(), self.resume()  # warm-up

    def slim(self) -> float:
        self.turn ^= 1
        block = self.blocks[self.turn]
        return _timed(lambda: self.runners.slim_logits(self.context + block, len(block)), self.device)

    def resume(self) -> float:
        block = self.blocks[self.turn]
        before = self.runners.resumed_full_passes
        seconds = _timed(lambda: self.runners.full_logits(self.context + block, len(block)), self.device)
        assert self.runners.resumed_full_passes == before + 1, "the probe's q pass did not resume"
        return seconds


def probe_context(target: nn.Module, prompt_ids: list[int], generated: list[int]) -> tuple[list[int], list[int] | None]:
    """``(context, source)``: what :func:`measure_forward_costs` times forwards after, for a prompt
    and tokens generated after it. Decoder-only: the prompt and the generated tokens, no source.
    Encoder-decoder: the prompt is the source the encoder reads, and the decoder's context is its
    start token followed by the generated tokens (what a decoder pass sees while generating)."""
    from viasd_adapt.model_kind import is_encoder_decoder

    if not is_encoder_decoder(target):
        return list(prompt_ids) + list(generated), None
    from viasd_adapt.routing.seq2seq import default_decoder_prompt

    return default_decoder_prompt(target) + list(generated), list(prompt_ids)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _decoder_only_probes(target, draft, slims, context, block) -> dict:
    """Probes of the target, the drafter and each mask's slim verifier (``slims``: name -> verifier),
    keyed by :func:`~viasd_adapt.bench.prices.kind_name`."""
    probes = {
        "c_full_block": _Probe(CachedRunner(target), _device(target), context, block),
        "c_full": _Probe(CachedRunner(target), _device(target), context, 1),
    }
    if draft is not None:  # None: a token-only drafter (prompt lookup) runs no model; its cost is 0
        probes["c_draft"] = _Probe(CachedRunner(draft), _device(draft), context, 1)
    for name, slim in slims.items():
        if slim.mask.first_skipped > 0:
            shared = _SharedProbe(target, slim, context, block)
            probes[kind_name("c_slim", name)] = shared.slim
            probes[kind_name("c_resume", name)] = shared.resume
        else:
            probes[kind_name("c_slim", name)] = _Probe(CachedRunner(slim.model, slim.new_cache), _device(target), context,
                                                       block)
    return probes


def _encoder_decoder_probes(target, draft, slims, context, block, source) -> dict:
    """Decoder passes of an encoder-decoder pair, as the engine runs them
    (:mod:`viasd_adapt.engine.seq2seq`): the target's encoder runs once on ``source``, and q and u
    read its output; a drafter with its own encoder runs it once too. No pass resumes (the
    encoder-decoder runners share no decoder prefix), so no ``c_resume`` is timed."""
    from viasd_adapt.engine.seq2seq import drafter_context
    from viasd_adapt.routing.encdec import EncoderContext, decoder_cache_config, seq2seq_cache
    from viasd_adapt.routing.seq2seq import Seq2SeqRunner

    device = _device(target)
    source_ids = torch.tensor([source], dtype=torch.long, device=device)
    encoder = EncoderContext.encode(target, source_ids)
    probes = {
        "c_full_block": _Probe(Seq2SeqRunner(target, encoder), device, context, block),
        "c_full": _Probe(Seq2SeqRunner(target, encoder), device, context, 1),
    }
    if draft is not None:
        own = drafter_context(draft, encoder, source_ids.to(_device(draft)))
        probes["c_draft"] = _Probe(Seq2SeqRunner(draft, own), _device(draft), context, 1)
    config = decoder_cache_config(target)
    for name, slim in slims.items():
        runner = Seq2SeqRunner(slim.model, encoder, lambda retained=slim.mask.retained: seq2seq_cache(config, retained))
        probes[kind_name("c_slim", name)] = _Probe(runner, device, context, block)
    return probes


def forward_probes(target: nn.Module, draft: nn.Module | None, slims: dict[str, SlimVerifier], context: list[int],
                   gamma: int, source: list[int] | None = None) -> dict:
    """One timing probe per forward kind (the target's, the drafter's and each mask's in ``slims``),
    keyed by :func:`kind_name`. For an encoder-decoder target every probe times a decoder pass: the
    encoder runs once on ``source`` (default: ``context``) before any timing, as in generation, and
    ``context`` is the decoder's sequence (:func:`probe_context` builds both from a prompt)."""
    from viasd_adapt.model_kind import is_encoder_decoder

    block = gamma + 1
    if is_encoder_decoder(target):
        return _encoder_decoder_probes(target, draft, slims, context, block, source or context)
    return _decoder_only_probes(target, draft, slims, context, block)


#: Tries per probe and round; the round keeps the fastest (:func:`time_rounds`).
FASTEST_OF = 3


def time_rounds(probes: dict, repeats: int, tries: int = FASTEST_OF) -> dict[str, list[float]]:
    """Every probe timed once per round, round-robin (a mask's slim pass before its resumed pass),
    so load from other processes hits them alike; every round's time is kept.

    A round's time of a probe is the fastest of ``tries`` back-to-back runs: another process can
    only make a pass slower (a preempted millisecond-long drafter pass reads ten times its cost), so
    the fastest try is the pass's own price, and one preemption no longer decides a round. What is
    left between rounds (load that lasts, memory bandwidth shared with other jobs) is the spread
    the report shows and the verdicts resample."""
    if tries < 1:
        raise ValueError(f"tries must be at least 1, got {tries}")
    rounds: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(max(1, repeats)):
        for name, probe in probes.items():
            rounds[name].append(min(probe() for _ in range(tries)))
    return rounds


def kind_name(kind: str, mask: str | None) -> str:
    """A forward kind's key in a run's price list: ``c_slim@mask.json`` for a mask's kinds."""
    return kind if mask is None else f"{kind}@{mask}"


#: The key of the one mask :func:`measure_forward_costs` times.
_ONE_MASK = "mask"


def measure_forward_costs(
    target: nn.Module,
    draft: nn.Module | None,
    slim: SlimVerifier | None = None,
    context: list[int] | None = None,
    gamma: int = 5,
    repeats: int = 15,
    source: list[int] | None = None,
) -> ForwardCosts:
    """Times single forwards of each kind, round-robin (:func:`time_rounds`); each cost is the median
    over rounds. A run that prices several settings uses one
    :func:`~viasd_adapt.bench.prices.measure_prices` list for all of them instead."""
    context = context or list(range(1, 65))
    slims = {_ONE_MASK: slim} if slim is not None else {}
    rounds = time_rounds(forward_probes(target, draft, slims, context, gamma, source), repeats)
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    return ForwardCosts(
        c_draft=medians.get("c_draft", 0.0),
        c_slim=medians.get(kind_name("c_slim", _ONE_MASK)),
        c_resume=medians.get(kind_name("c_resume", _ONE_MASK)),
        c_full_block=medians["c_full_block"],
        c_full=medians["c_full"],
        context_length=len(context),
        block_length=gamma + 1,
    )


def seconds_per_token(costs: ForwardCosts, passes: PassCounts, overlapped_drafting: bool = False) -> float:
    """Forward time per generated token (module docstring)."""
    drafting = passes.draft * costs.c_draft
    resumed = passes.resumed * (costs.c_resume if costs.c_resume is not None else costs.c_full_block)
    verifying = (
        passes.slim * (costs.c_slim or 0.0)
        + (passes.full - passes.resumed) * costs.c_full_block
        + resumed
        + passes.single * costs.c_full
    )
    return max(drafting, verifying) if overlapped_drafting else drafting + verifying


def full_equivalent(costs: ForwardCosts, passes: PassCounts) -> float:
    """Full-equivalent passes per token: every pass priced in full block passes (drafting and
    verifying summed, whatever the framework overlaps: this is the compute a token costs)."""
    return seconds_per_token(costs, passes) / costs.c_full_block


def analytic_bound(costs: ForwardCosts, passes: PassCounts, overlapped_drafting: bool = False) -> float | None:
    """Upper bound on speedup over autoregressive decoding (module docstring)."""
    per_token = seconds_per_token(costs, passes, overlapped_drafting)
    return costs.c_full / per_token if per_token > 0 else None


__all__ = ["ForwardCosts", "PassCounts", "analytic_bound", "forward_probes", "full_equivalent", "kind_name",
           "FASTEST_OF", "measure_forward_costs", "probe_context", "time_rounds",
           "seconds_per_token"]
