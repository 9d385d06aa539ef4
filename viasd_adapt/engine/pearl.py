"""Our own parallel decoder: the PEARL algorithm, with the VIA-SD slim tier in its verify step.

PEARL (Parallel spEculative decoding with Adaptive dRaft Length) is the algorithm of Liu et al.,
"PEARL: Parallel Speculative Decoding with Adaptive Draft Length", ICLR 2025 (arXiv 2408.11850).
PEARL ships no package; its reference code (smart-lty/ParallelSpeculativeDecoding) runs the drafter
and the target in two processes on two GPUs with the verification written inline. This module is
our own implementation of the algorithm, for batch 1, with the verify step routed through
:class:`viasd_adapt.engine.verifier.TieredVerifier` so that the slim tier plugs in exactly as it does
for every other framework. No code is copied from the reference.

It is engine code, not an adapter: there is no PEARL package to adapt. The framework's entry point,
:func:`viasd_adapt.adapters.pearl.pearl_generate` (which opens the tier: settings, mask, slim
verifier, plugins, and checks the inputs), builds a :class:`PearlDecoder` from this module.

One round, as implemented here
------------------------------
State between rounds: the *committed* ids (prompt + generated) and the *pending* drafts: tokens the
drafter already proposed past the committed ids that nobody has verified yet.

1. Drafter thread: drafts ``k`` tokens (``k = gamma``, fewer at the end of the budget) after
   ``committed + pending`` and hands over its first token ``d1`` as soon as it exists.
2. Target thread: verifies the block ``pending + [d1]`` through the seam
   (:meth:`TieredVerifier.verify <viasd_adapt.engine.verifier.TieredVerifier.verify>`) while the drafter keeps drafting ``d2..dk``.

   * pending empty -> **pre-verify**: the block is ``[d1]``, the first draft token checked early,
     while the rest of the block is still being drafted;
   * pending non-empty -> **post-verify**: the current block is checked while the drafter already
     drafts the next one.
3. Join both threads. If the round committed exactly the block, every draft was accepted, and
   ``d2..dk`` simply become the next pending drafts: drafting *continued* (**adaptive draft
   length**: a run of accepted drafts spans as many rounds as it lasts). Otherwise the round ended
   with the verifier's correction: both models roll back (their :class:`~viasd_adapt.routing.runner.CachedRunner`
   caches crop to the committed ids on their next call), the drafts are discarded and the next round
   is a pre-verify round.

No bonus token. In standard speculative decoding the target's row after a fully accepted block
yields a free "bonus" token. In PEARL that row verifies the first token of the *next* draft block,
which the drafter has already produced; a bonus would throw that block away. :func:`pearl_verifier`
therefore ends a cycle at the block when every draft was committed. This is lossless: whether the
token after the block is dropped depends only on the tokens before it, so the position is simply
decided again, next round, by a fresh lossless verification from the same prefix.

Parallelism (see :class:`RoleWorkers`): one dedicated thread per role, so each
:class:`~viasd_adapt.routing.runner.CachedRunner` (not thread-safe) is only ever used by one thread. The
drafter's runner lives on the drafter thread; the full and slim runners of the verifier live on the
target thread. The slim verifier is a routed *view* of the target that never mutates it (see
:mod:`viasd_adapt.routing.slim`), so sharing weights between the two target-side runners is safe
(and both run on the same thread anyway). Plugins (rule hooks and observers) are called by the
verifier, so in parallel mode they run on the target thread. Sequential mode runs the same jobs
inline, in the same order per role, with one random generator per role, so its output is identical.

Differences from the reference code, on purpose: one process with two threads instead of two
processes on two GPUs; the target starts its forward once the drafter's first token of the round
exists (the seam verifies token ids it is given) instead of at the same instant, which costs one
drafter step of overlap per round; the drafter and the target use separate random generators
instead of reseeding the global one per position.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from viasd_adapt.checks import check_max_new_tokens
from viasd_adapt.core.cycle import StopRule
from viasd_adapt.core.sampling import SamplingConfig, as_warper
from viasd_adapt.core.tiers import CycleResult
from viasd_adapt.engine.drafters import Drafter, host_draft
from viasd_adapt.engine.loop import GenerationOutput
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.errors import ConfigError

#: The framework name the verify step reports (metrics, plugins' ``framework`` argument).
FRAMEWORK = "pearl"


# =============================================================================== the verify seam


def pearl_verifier(context, sampling: SamplingConfig, share_prefix: bool = True) -> TieredVerifier:
    """The verifier of a PEARL run with ``context`` (:class:`~viasd_adapt.engine.context.RunContext`):
    its verify step with PEARL's cycle boundary, no bonus token.

    The position after a fully committed block belongs to the first token of the next block,
    which the drafter already produced, so :func:`viasd_adapt.core.cycle.decide_cycle` ends such a
    cycle at the block (``bonus_after_block=False``): lossy mode neither resolves nor escalates a
    position whose token would be dropped, and the exact modes drop q's bonus (lossless: the drop
    depends only on earlier tokens). When the settings adapt, the context's plan prices the
    drafter and the controller picks each round's arm from the rounds before it.
    """
    step = context.verify_step(FRAMEWORK, greedy=as_warper(sampling).greedy, bonus_after_block=False)
    return TieredVerifier.of(context, step, sampling, share_prefix=share_prefix)


# =============================================================================== threads / streams


def resolve_parallel(parallel: bool | str, draft_device: torch.device, target_device: torch.device) -> bool:
    """Whether the two roles run on two threads: ``True``/``False`` as given; ``"auto"`` runs them
    on threads except when both models sit on the same CUDA device.

    Why not threads on one GPU: the roles only overlap if their *host* work does, and at batch 1
    the host work (Python, module calls, kernel launches) is nearly all of it. PyTorch releases
    the GIL inside every op and takes it back after, so two busy Python threads hand the GIL over
    at op granularity, with an OS thread switch each time; launch-bound work gets slower, not
    faster. Measured on an H200 with the demo pair in float16: 2.8 s parallel against
    1.2 s sequential for 48 tokens; float32 0.4 s either way. On a CPU the ops themselves are the
    work and run without the GIL, so threads overlap (two cores: PEARL's two devices), and with
    the roles on two devices each has its own queue to keep busy. The output is the same either
    way (one random generator per role). ``benchmarks/pearl_profile.py`` measures both on a GPU.
    """
    if isinstance(parallel, bool):
        return parallel
    if parallel != "auto":
        raise ConfigError(f"parallel must be True, False or 'auto', got {parallel!r}")
    both_cuda = draft_device.type == target_device.type == "cuda"
    return not (both_cuda and (draft_device.index or 0) == (target_device.index or 0))  # a model's device has an index


class RoleWorkers:
    """Runs the drafter's and the target's jobs: on two dedicated threads, or inline.

    Parallel mode uses one single-thread :class:`ThreadPoolExecutor` per role, so a role's
    CachedRunners always run on the same OS thread and the two roles overlap. Jobs are finite
    (a draft block or one verification) and never wait on each other, so shutting the pools down
    with ``wait=True`` in ``__exit__`` cannot hang and leaves no thread behind, also when a job
    raised.

    Intra-op threads: ``torch.set_num_threads`` is process-global. With ``intra_op_threads`` set
    (default 1), the whole generation runs with that many intra-op threads, set on entry (also
    inside each worker thread, which is where OpenMP reads it) and restored on exit, even after an
    error. With 1, each role's ops run on its own thread, so two roles use two cores, which is how
    PEARL's two devices map onto a 2-core CPU. Other threads of the process see the same setting
    while a generation runs. Sequential mode uses the same setting, so both modes compute the same
    numbers.

    CUDA: in parallel mode each role gets its own stream, on the device of that role's model
    (``devices``), unless ``streams=False``; a job runs under its stream and synchronises it before
    handing results over. Both roles on one CUDA device is a poor fit for threads (see
    :func:`resolve_parallel`).
    """

    ROLES = ("drafter", "target")

    def __init__(self, parallel: bool, device: torch.device | dict[str, torch.device], intra_op_threads: int | None = 1,
                 streams: bool = True):
        if intra_op_threads is not None and (isinstance(intra_op_threads, bool) or int(intra_op_threads) < 1):
            raise ConfigError(f"intra_op_threads must be a positive integer or None, got {intra_op_threads!r}")
        self.parallel = parallel
        self.devices = dict(device) if isinstance(device, dict) else {role: device for role in self.ROLES}
        self.device = self.devices["target"]
        self.intra_op_threads = intra_op_threads
        self.use_streams = streams
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._streams: dict[str, object] = {}
        self._saved_threads: int | None = None

    def _init_worker(self) -> None:
        if self.intra_op_threads is not None:
            torch.set_num_threads(self.intra_op_threads)

    def __enter__(self) -> "RoleWorkers":
        if self.intra_op_threads is not None:
            self._saved_threads = torch.get_num_threads()
            torch.set_num_threads(self.intra_op_threads)
        if self.parallel:
            for role in self.ROLES:
                self._pools[role] = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"pearl-{role}", initializer=self._init_worker
                )
                role_device = self.devices[role]
                if self.use_streams and role_device.type == "cuda":
                    self._streams[role] = torch.cuda.Stream(device=role_device)
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            for pool in self._pools.values():
                pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self._pools.clear()
            self._streams.clear()
            if self._saved_threads is not None:
                torch.set_num_threads(self._saved_threads)

    def sync(self, role: str) -> None:
        """Waits for the role's queued GPU work, so another stream may read its tensors."""
        stream = self._streams.get(role)
        if stream is not None:
            stream.synchronize()

    def submit(self, role: str, fn: Callable, *args) -> Future:
        if not self.parallel:
            future: Future = Future()
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # delivered through the future, like a worker thread's
                future.set_exception(exc)
            return future
        return self._pools[role].submit(self._run_on_stream, role, fn, *args)

    def _run_on_stream(self, role: str, fn: Callable, *args):
        stream = self._streams.get(role)
        if stream is None:
            return fn(*args)
        with torch.cuda.stream(stream):
            out = fn(*args)
        stream.synchronize()
        return out


# =============================================================================== the decoding loop


@dataclass
class DraftBlock:
    """Draft tokens with the drafter's distribution row for each (``(V,)`` tensors)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[torch.Tensor] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def rest(self) -> "DraftBlock":
        return DraftBlock(self.tokens[1:], self.probs[1:])


@dataclass
class PearlStats:
    """PEARL-specific counters, next to the shared :class:`~viasd_adapt.core.metrics.TierMetrics`.

    ``accepted_runs`` are PEARL's adaptive draft lengths: how many drafts were accepted in a row
    between two rejections, across rounds. ``draft_busy_s`` / ``target_busy_s`` are the time each
    role spent in its jobs; their sum over ``wall_s`` shows how much they overlapped.
    """

    parallel: bool = True
    rounds: int = 0
    pre_verify_rounds: int = 0
    post_verify_rounds: int = 0
    drafted_total: int = 0
    discarded_drafts: int = 0
    accepted_runs: list[int] = field(default_factory=list)
    draft_busy_s: float = 0.0
    target_busy_s: float = 0.0
    wall_s: float = 0.0

    @property
    def overlap(self) -> float:
        """Busy time of both roles over wall time: 1.0 = no overlap, 2.0 = perfect overlap."""
        return (self.draft_busy_s + self.target_busy_s) / self.wall_s if self.wall_s else 0.0


@dataclass
class PearlOutput(GenerationOutput):
    """:class:`GenerationOutput` plus PEARL's own counters."""

    stats: PearlStats = field(default_factory=PearlStats)


class PearlDecoder:
    """One PEARL generation setup: a drafter, the verify step (:func:`pearl_verifier`), and the round loop.

    A decoder holds KV caches and metrics, so use one per generation
    (:func:`viasd_adapt.adapters.pearl.pearl_generate` does).
    """

    def __init__(
        self,
        drafter: Drafter,
        verifier: TieredVerifier,
        parallel: bool | str = True,
        seed: int | None = None,
        intra_op_threads: int | None = 1,
        streams: bool = True,
    ):
        self.drafter = drafter
        self.verifier = verifier
        self.device = _model_device(verifier.target)
        self.draft_device = _drafter_device(drafter, self.device)
        self.parallel = resolve_parallel(parallel, self.draft_device, self.device)
        self.intra_op_threads = intra_op_threads
        self.streams = streams
        if seed is None:  # reproducible under torch.manual_seed, and one stream per role
            seed = int(torch.randint(0, 2**62, (1,)).item())
        # One generator per role: each thread draws from its own in a fixed order, so parallel and
        # sequential runs draw the same numbers.
        self.draft_generator = torch.Generator(device=self.draft_device).manual_seed(seed)
        self.target_generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.stats = PearlStats(parallel=self.parallel)
        self._run = 0
        self._workers: RoleWorkers | None = None
        self.eos: tuple[int, ...] = ()

    # ------------------------------------------------------------------ role jobs
    def _draft_job(self, sequence: list[int], count: int, first: Future) -> DraftBlock:
        """Drafter thread: ``count`` tokens after ``sequence``; the first is published early."""
        start = time.perf_counter()
        block = DraftBlock()
        try:
            for i in range(count):
                ids, probs = host_draft(self.drafter, sequence + block.tokens, 1, self.draft_generator)
                block.tokens.append(ids[0])
                block.probs.append(probs[0])
                if i == 0:
                    self._workers.sync("drafter")
                    first.set_result((block.tokens[0], block.probs[0]))
        except BaseException as exc:
            if not first.done():
                first.set_exception(exc)
            raise
        finally:
            self.stats.draft_busy_s += time.perf_counter() - start
        return block

    def _verify_job(self, committed: list[int], block: DraftBlock, budget: int) -> CycleResult:
        """Target thread: the seam, on the block ``pending + [d1]``, cut at the budget and EOS
        before the metrics and the observers see it."""
        start = time.perf_counter()
        try:
            drafts = torch.tensor(block.tokens, dtype=torch.long, device=self.device)
            p = torch.stack([row.to(self.device) for row in block.probs])
            return self.verifier.verify(
                committed, drafts, p, self.target_generator, max_tokens=budget, eos_token_ids=self.eos,
                draft_ids=block.tokens,
            )
        finally:
            self.stats.target_busy_s += time.perf_counter() - start

    # ------------------------------------------------------------------ one round
    def _round(self, committed: list[int], pending: DraftBlock, budget: int) -> tuple[DraftBlock, CycleResult, DraftBlock]:
        """Runs one PEARL round; returns ``(verified block, its verdict, the freshly drafted block)``."""
        workers = self._workers
        n_new = min(self.verifier.settings.gamma, budget - len(pending))
        if n_new <= 0:  # the pending drafts alone fill the budget: nothing left to draft
            block = DraftBlock(pending.tokens[:budget], pending.probs[:budget])
            return block, workers.submit("target", self._verify_job, committed, block, budget).result(), DraftBlock()
        first: Future = Future()
        drafting = workers.submit("drafter", self._draft_job, committed + pending.tokens, n_new, first)
        verifying = None
        try:
            d1, p1 = first.result()  # raises if the drafter failed before its first token
            block = DraftBlock(pending.tokens + [d1], pending.probs + [p1])
            verifying = workers.submit("target", self._verify_job, committed, block, budget)
            result = verifying.result()
            fresh = drafting.result()
        finally:  # never leave a job of this round running behind an error
            for job in (drafting, verifying):
                if job is not None:
                    job.exception()
        self.stats.drafted_total += len(fresh)
        return block, result, fresh

    # ------------------------------------------------------------------ the loop
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_ids: Iterable[int] = ()) -> PearlOutput:
        check_max_new_tokens(max_new_tokens)
        self.eos = tuple(sorted({int(e) for e in eos_token_ids}))
        metrics = self.verifier.new_generation()
        draft_passes_before = self.drafter.passes
        generated: list[int] = []
        pending = DraftBlock()
        start = time.perf_counter()
        devices = {"drafter": self.draft_device, "target": self.device}
        with RoleWorkers(self.parallel, devices, self.intra_op_threads, self.streams) as workers:
            self._workers = workers
            try:
                while len(generated) < max_new_tokens:
                    budget = max_new_tokens - len(generated)
                    self._count_round(pending)
                    block, result, fresh = self._round(prompt_ids + generated, pending, budget)
                    kept, stop = StopRule.of(budget, self.eos).split(result.tokens)
                    generated += kept
                    whole_block = kept == block.tokens
                    self._track_runs(result, whole_block)
                    if stop:
                        break
                    if whole_block:
                        pending = fresh.rest()
                    else:
                        self.stats.discarded_drafts += len(block) - result.drafts_judged + max(0, len(fresh) - 1)
                        pending = DraftBlock()
            finally:
                self._workers = None
                self.stats.wall_s = time.perf_counter() - start
        if self._run:
            self.stats.accepted_runs.append(self._run)
        ledger = self.verifier.ledger
        ledger.keep_first(len(generated))
        ledger.count_draft_passes(self.drafter.passes - draft_passes_before)
        return PearlOutput(generated, metrics.token_tiers[:], metrics, self.stats)

    def _count_round(self, pending: DraftBlock) -> None:
        self.stats.rounds += 1
        if pending.tokens:
            self.stats.post_verify_rounds += 1
        else:
            self.stats.pre_verify_rounds += 1

    def _track_runs(self, result: CycleResult, whole_block: bool) -> None:
        self._run += result.drafts_kept
        if not whole_block:
            self.stats.accepted_runs.append(self._run)
            self._run = 0


# =============================================================================== devices


def _drafter_device(drafter: Drafter, default: torch.device) -> torch.device:
    """Where the drafter samples (its generator must live there); a ModelDrafter knows its model."""
    model = getattr(getattr(drafter, "runner", None), "model", None)
    return _model_device(model) if isinstance(model, nn.Module) else default


def _model_device(model: nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


__all__ = [
    "FRAMEWORK",
    "DraftBlock",
    "PearlDecoder",
    "PearlOutput",
    "PearlStats",
    "RoleWorkers",
    "pearl_verifier",
    "resolve_parallel",
]
