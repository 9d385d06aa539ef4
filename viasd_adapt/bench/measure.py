"""What a benchmark row actually ran: forward passes per model and tensor memory.

Counting is done from the outside, with forward hooks on the target and the drafter, so every row
is measured the same way whatever framework drives the models (our engine, a patched
``generate``, PEARL's threads). Why hooks rather than each framework's own counters: an unpatched
framework has no counters, and a row must not be able to under-report its own work.

The slim verifier is a shallow-copied *view* of the target (:mod:`viasd_adapt.routing.slim`) that
shares every child module off the path to the layer list, the LM head included. So a forward of
the LM head that does not happen inside the target's own forward (tracked with a pre-hook, per
thread) is a slim pass; a target forward is a full pass. This holds whether a view was built
before or after the hooks were registered, and whether or not it copies the target's hook
dictionaries. (A model without ``get_output_embeddings``, e.g. EAGLE's inner decoder, falls back
to "a forward of a copy that inherited the hook is a slim pass".)

Memory (CPU): parameter bytes of every model that ran at least once, plus, for each KV cache object
seen during the run, its largest size, summed (an upper bound on the caches alive at once).
On CUDA: ``torch.cuda.max_memory_allocated`` over the run, which includes everything. The JSON says
which one was used.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

MB = 1024 * 1024


def tensor_bytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def cache_bytes(cache: Any) -> int:
    """Bytes of the key/value tensors of an HF cache object (0 for anything unknown)."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        return 0
    return sum(tensor_bytes(getattr(layer, "keys", None)) + tensor_bytes(getattr(layer, "values", None)) for layer in layers)


def parameter_bytes(*models: nn.Module) -> int:
    """Bytes of the distinct parameter tensors of ``models`` (shared weights counted once)."""
    seen: set[int] = set()
    total = 0
    for model in models:
        for param in model.parameters():
            key = param.data_ptr()
            if key not in seen:
                seen.add(key)
                total += tensor_bytes(param)
    return total


def _cache_of(kwargs: dict, output: Any) -> Any:
    for key in ("past_key_values", "cache"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return getattr(output, "past_key_values", None)


@dataclass
class RunMeasure:
    """What one generation ran."""

    full_passes: int = 0
    slim_passes: int = 0
    draft_passes: int = 0
    cache_peaks: dict[int, int] = field(default_factory=dict)
    models_used: dict[str, nn.Module] = field(default_factory=dict)

    @property
    def peak_cache_bytes(self) -> int:
        return sum(self.cache_peaks.values())


class PassMeter:
    """Forward hooks on the full and draft models; ``meter.start()`` / ``meter.stop()`` bracket
    one run. More modules can be added later with :meth:`watch` (e.g. EAGLE's own base model).

    Hooks are removed by :meth:`close` (also a context manager), even if a run raises.
    """

    def __init__(self, target: nn.Module, draft: nn.Module | None = None):
        self.current: RunMeasure | None = None
        self._handles: list = []
        self._watched: set[int] = set()
        self.watch(target, "full", name="target")
        if draft is not None:
            self.watch(draft, "draft", name="draft")

    def watch(self, module: nn.Module, role: str, name: str) -> None:
        """Counts forwards of ``module`` as ``role`` ("full" or "draft").

        For "full", forwards of routed views of ``module`` count as slim passes (see the module
        docstring for how they are recognised).
        """
        if id(module) in self._watched:
            return
        if role not in ("full", "draft"):
            raise ValueError(f"role must be 'full' or 'draft', got {role!r}")
        self._watched.add(id(module))
        if role == "draft":
            def on_draft(called, args, kwargs, output) -> None:
                if self.current is not None:
                    self.current.draft_passes += 1
                    self.current.models_used[name] = module
                    self._record_cache(kwargs, output)

            self._handles.append(module.register_forward_hook(on_draft, with_kwargs=True))
            return

        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        inside = threading.local()  # depth of ``module``'s own forward on this thread

        def before(called, args, kwargs) -> None:
            if called is module:
                inside.depth = getattr(inside, "depth", 0) + 1

        def after(called, args, kwargs, output) -> None:
            if called is module:
                inside.depth = getattr(inside, "depth", 1) - 1
            current = self.current
            if current is None:
                return
            if called is module:
                current.full_passes += 1
            elif head is None:  # a view that inherited this hook, and no shared head to count on
                current.slim_passes += 1
            current.models_used[name] = module
            self._record_cache(kwargs, output)

        def on_head(called, args, output) -> None:
            current = self.current
            if current is not None and getattr(inside, "depth", 0) == 0:
                current.slim_passes += 1
                current.models_used[name] = module

        self._handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        self._handles.append(module.register_forward_hook(after, with_kwargs=True, always_call=True))
        if head is not None:
            self._handles.append(head.register_forward_hook(on_head))

    def _record_cache(self, kwargs: dict, output: Any) -> None:
        cache = _cache_of(kwargs, output)
        if cache is not None and self.current is not None:
            size = cache_bytes(cache)
            key = id(cache)
            if size > self.current.cache_peaks.get(key, 0):
                self.current.cache_peaks[key] = size

    # ------------------------------------------------------------------ use
    def start(self) -> RunMeasure:
        self.current = RunMeasure()
        return self.current

    def stop(self) -> RunMeasure:
        measure, self.current = self.current, None
        return measure or RunMeasure()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._watched = set()

    def __enter__(self) -> "PassMeter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def peak_memory_mb(measure: RunMeasure, device: torch.device, cuda_peak_bytes: int | None, extra_bytes: int = 0) -> float:
    """Peak tensor memory of one run in MiB (see the module docstring for what is counted).

    ``extra_bytes``: buffers a framework allocates outside any HF cache object (EAGLE's
    pre-allocated KV cache), reported by its row runner.
    """
    if device.type == "cuda" and cuda_peak_bytes is not None:
        return cuda_peak_bytes / MB
    return (parameter_bytes(*measure.models_used.values()) + measure.peak_cache_bytes + extra_bytes) / MB


def memory_source(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated"
    return "parameter bytes of the models used + peak KV-cache bytes (sum over caches)"
