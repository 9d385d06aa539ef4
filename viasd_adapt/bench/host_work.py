"""The loop's own work between forwards: host time and host synchronisations per cycle.

Why: on a GPU a forward of a 7B model takes milliseconds, so what a decoding loop does between
forwards (Python, bookkeeping, small tensor ops) is a share of every cycle; and every ``.item()``,
``.tolist()`` or Python branch on a device tensor makes the host wait for the device (a
synchronisation), which stops the GPU's queue from running ahead. Both are properties of the loop's
code, so both can be measured on a CPU with a model whose forwards cost almost nothing:

* :class:`ForwardTimer` times what the models' compute modules take (embeddings, each decoder
  layer, final norm, rotary embedding, output head; the slim view and a resumed pass call the same
  modules), so that a run's wall time minus it is the host's own work;
* :class:`SyncCounter` counts the calls that would synchronise with a device
  (:data:`SYNC_FUNCTIONS`), with a :class:`torch.overrides.TorchFunctionMode` that sees every tensor
  method and torch function; calls made inside a forward (the model's own code, the same in every
  framework) are counted apart from the loop's.

``benchmarks/host_overhead.py`` runs each framework's path through both, beside stock HF assisted
generation.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

from torch import nn
from torch.overrides import TorchFunctionMode

#: Tensor methods and torch functions whose result the host needs before it can go on: on a GPU
#: each waits for the device's queue (a value copied to the host, or an output whose size depends
#: on the data).
SYNC_FUNCTIONS = frozenset({
    "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "is_nonzero",
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "equal", "allclose",
})


def _name(func) -> str:
    return getattr(func, "__name__", "") or str(func)


class SyncCounter(TorchFunctionMode):
    """Counts synchronising calls (:data:`SYNC_FUNCTIONS`) while active, by name; those made while
    ``inside`` (a :class:`ForwardTimer`) says a forward is running are counted in :attr:`in_forwards`."""

    def __init__(self, inside: "ForwardTimer | None" = None, shares: "SyncCounter | None" = None) -> None:
        super().__init__()
        self.inside = inside
        # a counter for another thread (torch function modes are per thread) adds to the first one's counts
        self.by_name: Counter[str] = shares.by_name if shares is not None else Counter()
        self.in_forwards: Counter[str] = shares.in_forwards if shares is not None else Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = _name(func)
        if name in SYNC_FUNCTIONS:
            (self.in_forwards if self.inside is not None and self.inside.depth else self.by_name)[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def loop(self) -> int:
        """Synchronising calls made by the loop (outside every forward)."""
        return sum(self.by_name.values())

    @property
    def forwards(self) -> int:
        """Synchronising calls made inside the models' forwards."""
        return sum(self.in_forwards.values())


def compute_modules(model: nn.Module) -> list[nn.Module]:
    """The modules a forward of ``model`` computes in, none inside another: the decoder body's
    children (embeddings, norm, rotary embedding), each decoder layer, and the output head."""
    body = getattr(model, "model", None)
    if body is None or not isinstance(body, nn.Module):
        return [model]
    found: list[nn.Module] = []
    for child in body.children():
        found.extend(child if isinstance(child, nn.ModuleList) else [child])
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return found + ([head] if head is not None else [])


class ForwardTimer:
    """Wall time spent inside the compute modules of some models (:func:`compute_modules`), with
    hooks that :meth:`attach` adds and :meth:`detach` removes; ``depth`` > 0 while one runs."""

    def __init__(self) -> None:
        self.seconds = 0.0  # summed over threads: PEARL's two roles' forwards overlap
        self.calls = 0
        self._local = threading.local()  # each thread's depth and start time
        self._lock = threading.Lock()
        self._handles: list = []

    @property
    def depth(self) -> int:
        """How many compute modules are running in the calling thread (0: none, the loop's own code)."""
        return getattr(self._local, "depth", 0)

    def _enter(self, module, args) -> None:
        if self.depth == 0:
            self._local.started = time.perf_counter()
        self._local.depth = self.depth + 1

    def _leave(self, module, args, output) -> None:
        self._local.depth = self.depth - 1
        if self._local.depth == 0:
            with self._lock:
                self.seconds += time.perf_counter() - self._local.started
                self.calls += 1

    def attach(self, *models: nn.Module) -> "ForwardTimer":
        seen: set[int] = set()
        for model in models:
            for module in compute_modules(model):
                if id(module) not in seen:
                    seen.add(id(module))
                    self._handles.append(module.register_forward_pre_hook(self._enter))
                    self._handles.append(module.register_forward_hook(self._leave))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()



@contextmanager
def timing_forwards(*models: nn.Module) -> Iterator[ForwardTimer]:
    """A :class:`ForwardTimer` on ``models`` for the block, its hooks removed after."""
    timer = ForwardTimer().attach(*models)
    try:
        yield timer
    finally:
        timer.detach()


@contextmanager
def counting_syncs(inside: ForwardTimer | None = None) -> Iterator[SyncCounter]:
    """A :class:`SyncCounter` active for the block (calls inside ``inside``'s forwards counted apart),
    in this thread and in every thread started during it (PEARL's role workers): a torch function
    mode is per thread, so ``threading.Thread.run`` is wrapped for the block, and restored after."""
    counter = SyncCounter(inside)
    original_run = threading.Thread.run

    def counted_run(thread: threading.Thread) -> None:
        with SyncCounter(inside, shares=counter):
            original_run(thread)

    threading.Thread.run = counted_run
    try:
        with counter:
            yield counter
    finally:
        threading.Thread.run = original_run


__all__ = ["SYNC_FUNCTIONS", "ForwardTimer", "SyncCounter", "compute_modules", "counting_syncs", "timing_forwards"]
