"""What a run held in memory, and the passes of runs that keep no metrics of their own.

Tiered rows report their passes through :class:`~viasd_adapt.core.metrics.TierMetrics`; only the rows
without viasd-adapt (``ar``, ``plain``, stock prompt lookup) need counting from the outside, with
forward hooks on the target and the drafter. A stock row is priced in full: every drafter forward
counts, the assistant's included, which stock assisted generation runs through a shallow copy of
the drafter that shares its hook registry; a stock row that drafts with a model but shows no
drafter forward is left unpriced (:func:`viasd_adapt.bench.run.uncounted_reason`). The same hooks see every KV cache a run uses: the
weight-sharing views of the target (slim verifier, resumed passes) are built during the run and copy
the target's hook registries, so their caches are seen too. Cache layers shared by several cache
objects (the shared prefix) are counted once.

A pass is priced by what it ran (:mod:`viasd_adapt.bench.costs`): a target forward that feeds one
new token costs a one-token pass, one that feeds more (a draft block, a prompt) a block pass. So the
hooks also count the target's **one-token forwards** (``single_passes``): autoregressive steps, and
the steps of stock prompt lookup and of the tier's prompt-lookup drafter that found no n-gram to
propose (the target then checks only the last token). The target's own forwards are counted
(``module is model``), and of the one view that runs every layer (q's under a shared prefix,
:data:`~viasd_adapt.routing.view.FULL_DEPTH_VIEW`); a slim or resumed pass is priced as a block
pass of its kind whatever its length.

Memory (CPU): parameter bytes of every model that ran, plus the peak bytes of every cache layer seen
(an upper bound on what was alive at once). On CUDA: ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from viasd_adapt.routing.view import FULL_DEPTH_VIEW

MB = 1024 * 1024


def tensor_bytes(tensor) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def parameter_bytes(*models: nn.Module) -> int:
    """Bytes of the distinct parameter tensors of ``models`` (shared weights counted once)."""
    seen: dict[int, int] = {}
    for model in models:
        for param in model.parameters():
            seen[param.data_ptr()] = tensor_bytes(param)
    return sum(seen.values())


@dataclass
class RunMeasure:
    """What one run did, seen from the hooks."""

    full_passes: int = 0
    single_passes: int = 0  # of the full passes, those that fed the target exactly one new token
    draft_passes: int = 0
    layer_peaks: dict[int, int] = field(default_factory=dict)
    models_used: dict[str, nn.Module] = field(default_factory=dict)

    def memory_mb(self, extra_bytes: int = 0) -> float:
        return (parameter_bytes(*self.models_used.values()) + sum(self.layer_peaks.values()) + extra_bytes) / MB


def new_tokens(args: tuple, kwargs: dict) -> int | None:
    """How many tokens a forward fed (the length of its ``input_ids`` or ``inputs_embeds``, however
    passed); None when it fed neither."""
    for key in ("decoder_input_ids", "input_ids", "inputs_embeds"):  # a decoder's new tokens first
        value = kwargs.get(key)
        if isinstance(value, torch.Tensor):
            return int(value.shape[1]) if value.dim() > 1 else int(value.shape[0])
    if args and isinstance(args[0], torch.Tensor):
        return int(args[0].shape[1]) if args[0].dim() > 1 else int(args[0].shape[0])
    return None


class RunMeter:
    """Forward hooks on the target and drafter; ``start()`` / ``stop()`` bracket one run.

    Hooks are removed by :meth:`close` (also a context manager), even if a run raises.
    """

    def __init__(self, target: nn.Module, draft: nn.Module | None):
        self.current: RunMeasure | None = None
        self._handles = [target.register_forward_hook(self._hook("target", target), with_kwargs=True)]
        if draft is not None:
            self._handles.append(draft.register_forward_hook(self._hook("draft", draft), with_kwargs=True))

    def _hook(self, name: str, model: nn.Module):
        def after(module, args, kwargs, output) -> None:
            current = self.current
            if current is None:
                return
            current.models_used[name] = model
            if name == "draft":
                # the drafter or a shallow copy of it (stock assisted generation runs
                # adapters.hf.runner.drafting_blocks_of's copy, which shares the drafter's hook
                # registry): every forward it makes is a drafter pass
                current.draft_passes += 1
            elif module is model:  # the target itself, not one of its views
                current.full_passes += 1
                current.single_passes += new_tokens(args, kwargs) == 1
            elif name == "target" and getattr(module, FULL_DEPTH_VIEW, False):
                # q's view under a shared prefix runs every layer: its one-token passes are one-token
                # passes (its passes themselves are in the run's TierMetrics)
                current.single_passes += new_tokens(args, kwargs) == 1
            cache = kwargs.get("past_key_values", kwargs.get("cache")) or getattr(output, "past_key_values", None)
            for layer in getattr(cache, "layers", ()):
                size = tensor_bytes(getattr(layer, "keys", None)) + tensor_bytes(getattr(layer, "values", None))
                if size > current.layer_peaks.get(id(layer), 0):
                    current.layer_peaks[id(layer)] = size

        return after

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

    def __enter__(self) -> "RunMeter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def memory_source(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated"
    return "parameter bytes of the models used + peak bytes of every KV-cache layer (shared layers once)"


__all__ = ["MB", "RunMeasure", "RunMeter", "memory_source", "new_tokens", "parameter_bytes", "tensor_bytes"]
