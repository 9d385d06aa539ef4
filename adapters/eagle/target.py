"""The full verifier q: eagle's own base model and pre-allocated KV cache, fed by the adapter.

Eagle's loop keeps q's cache in step with the committed sequence. Under the tier q may skip cycles
(lossy tiers 1-2 commit without it), so :class:`FullTreeVerifier` keeps ``valid``, how many committed
tokens q's cache holds, and feeds the lag (committed tokens q never saw) in front of whatever it is
asked about, in the same forward.

Resumed passes (prefix sharing, package docstring): when every token q is asked about went through
the slim tree pass, q runs only its layers from s1 on, starting from the ``h_s1`` the slim verifier
recorded, and copies the slim verifier's keys/values of the layers below s1 into its own cache
(identical by construction: same weights, same inputs, same positions), so q's cache stays complete.
"""

from __future__ import annotations

import torch
from torch import nn

from viasd_adapt.adapters.eagle.slim_tree import EagleInjectLayer, EagleSkippedLayer, LengthOnly, SlimTreeVerifier
from viasd_adapt.routing.shared import HiddenSlot
from viasd_adapt.routing.view import build_layer_view, view_owner


class FullTreeVerifier:
    """q over eagle's cache, with the lag fed in front; resumed at s1 when ``slim`` records its prefix."""

    def __init__(self, ea_model: nn.Module, slim: SlimTreeVerifier | None = None):
        self.model = ea_model
        self.valid = 0
        self.passes = 0
        self.resumed_passes = 0
        self.slim = slim if slim is not None and slim.records_prefix else None
        if self.slim is not None:
            s1 = self.slim.s1
            base = ea_model.base_model
            self._slot = HiddenSlot()
            layers = [EagleSkippedLayer(i) for i in range(s1 - 1)] + [EagleInjectLayer(s1 - 1, self._slot)]
            self._resume = view_owner(build_layer_view(base, layers + list(base.model.layers[s1:])))
            self._resume.tree_mask = None
            self._prefix_lengths = torch.zeros(2 * s1, dtype=torch.long)
            self._prefix_past = [
                [LengthOnly(self._prefix_lengths[2 * i]), LengthOnly(self._prefix_lengths[2 * i + 1])] for i in range(s1)
            ]

    @property
    def shares_prefix(self) -> bool:
        return self.slim is not None

    def new_generation(self, prompt_length: int) -> None:
        """eagle's prefill fed the prompt: q's cache holds it."""
        self.valid = prompt_length

    def cache_bytes(self) -> int:
        data = getattr(self.model, "past_key_values_data", None) or []
        return sum(t.numel() * t.element_size() for t in data)

    # ------------------------------------------------------------------ forwards
    def _lag_and(self, input_ids: torch.Tensor, extra: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        lag = input_ids[0, self.valid :].tolist()
        feed = torch.tensor([lag + extra], dtype=torch.long, device=input_ids.device)
        positions = torch.arange(self.valid, self.valid + feed.shape[1], device=input_ids.device)[None]
        return feed, positions

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, extra: list[int], tree_mask: torch.Tensor | None = None,
                extra_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q over the lag plus ``extra``, from layer 0, in one forward. ``extra`` is a linear
        continuation, or a small tree when ``tree_mask`` (``(1, 1, n, n)``) and ``extra_positions``
        (depths below the end of ``input_ids``) are given. Returns logits and hidden states of the
        ``extra`` rows; q's cache then holds the lag and ``extra`` at consecutive slots."""
        model = self.model
        feed, positions = self._lag_and(input_ids, extra)
        if extra_positions is not None:
            positions[0, feed.shape[1] - len(extra) :] = extra_positions.to(positions.device) + input_ids.shape[1]
        model.current_length_data.fill_(self.valid)
        inner = model.base_model.model
        saved = inner.tree_mask
        inner.tree_mask = tree_mask
        try:
            hidden = inner(input_ids=feed, past_key_values=model.past_key_values, position_ids=positions, return_dict=False)[0]
        finally:
            inner.tree_mask = saved
        self.passes += 1
        hidden = hidden[0, -len(extra) :].clone()
        return model.base_model.lm_head(hidden).float(), hidden

    @torch.inference_mode()
    def resumed(self, input_ids: torch.Tensor, extra: list[int], nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Same as :meth:`forward` for a linear ``extra`` whose tokens are the tree nodes ``nodes``
        of the slim verifier's latest tree pass (the lag went through earlier slim passes), run
        from layer s1 on."""
        model, slim = self.model, self.slim
        length = input_ids.shape[1]
        feed, positions = self._lag_and(input_ids, extra)
        slots = torch.cat([torch.arange(self.valid, length), nodes.cpu() + length])
        h_s1, prefix_kv = slim.prefix_entries(slots)
        model.current_length_data.fill_(self.valid)
        self._prefix_lengths.fill_(self.valid)
        past = self._prefix_past + list(model.past_key_values[slim.s1 :])
        self._slot.record(h_s1[None])
        try:
            hidden = self._resume(input_ids=feed, past_key_values=past, position_ids=positions, return_dict=False)[0]
        finally:
            self._slot.value = None
        n = feed.shape[1]
        for i in range(slim.s1):  # keep q's own cache complete below s1 (see the module docstring)
            for part, entries in zip(model.past_key_values[i], prefix_kv[2 * i : 2 * i + 2]):
                part.data[..., self.valid : self.valid + n, :] = entries.to(part.data.device)
                part.current_length.fill_(self.valid + n)
        self.passes += 1
        self.resumed_passes += 1
        hidden = hidden[0, -len(extra) :].clone()
        return model.base_model.lm_head(hidden).float(), hidden

    def path(self, input_ids: torch.Tensor, extra: list[int], nodes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """q over the lag plus the linear ``extra``; resumed when the tokens are known tree nodes of
        the latest slim pass (``nodes``) and the prefix is shared."""
        if nodes is not None and self.shares_prefix:
            return self.resumed(input_ids, extra, nodes)
        return self.forward(input_ids, extra)

    # ------------------------------------------------------------------ cache bookkeeping
    def holds(self, valid: int) -> None:
        """q's cache holds the first ``valid`` committed tokens (the rest is lag)."""
        self.valid = valid
        self.model.current_length_data.fill_(valid)

    def compact(self, sources: torch.Tensor, start: int) -> None:
        """Moves q's entries at slots ``sources`` to ``start, start+1, ...`` (eagle's own compaction),
        after which q holds exactly the committed tokens up to them."""
        for data in self.model.past_key_values_data:
            data[..., start : start + sources.numel(), :] = data[..., sources.to(data.device), :]
        self.holds(start + sources.numel())


__all__ = ["FullTreeVerifier"]
