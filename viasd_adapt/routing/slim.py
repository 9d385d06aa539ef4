"""The slim verifier u = q'_z: the target run with the masked-out decoder layers bypassed.

Design (VIA-SD.md section 1):

* **No weight copies, no mutation of the target.** :class:`SlimVerifier` builds a *view* of the
  model: shallow copies of the modules on the path from the top model down to the layer list, with a
  new ``nn.ModuleList`` in which skipped layers are :class:`PassThroughLayer` stubs. Every parameter
  tensor is shared with the target. The target object itself is never touched, so a full forward
  running at the same time in another thread (PEARL) is unaffected: nothing to patch, nothing to
  restore, nothing to leak.
* **Identity stubs, not a filtered list.** Gemma2/Qwen2-style models pick each layer's attention
  type (sliding or full) by its index; keeping the list length keeps those indices right.
* **Its own KV cache.** The slim verifier's retained layers see *its* residual stream, so their keys
  and values differ from q's for the same layers. u therefore keeps a separate :class:`SlimCache`
  holding only retained layers (skipped layers stay empty). q's cache is never written by a slim
  pass. The cost is the KV memory of the retained layers, measured by ``viasd bench``.
* **Layer 0 pitfall.** HF reads the cache length from layer 0 for position ids and masks. When
  layer 0 is skipped it is empty, so :class:`SlimCache` answers length queries from the first
  retained layer of the same attention type.
"""

from __future__ import annotations

import copy
import functools
import types

import torch
from torch import nn
from transformers import DynamicCache

from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import RoutingMask


class PassThroughLayer(nn.Module):
    """A bypassed decoder layer: returns the residual stream unchanged and never touches the cache.

    transformers >= 5 decoder layers return the hidden-states tensor itself, so the stub does too.
    """

    def __init__(self, layer_index: int):
        super().__init__()
        self.layer_index = layer_index

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return hidden_states

    def extra_repr(self) -> str:
        return f"skipped_layer={self.layer_index}"


_HOOK_DICTS = (
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks",
)


def _shallow_module_copy(module: nn.Module) -> nn.Module:
    """A new module object sharing parameters, buffers and children with ``module``.

    The child registry and the hook registries are copied, so replacing a child on the copy, or
    registering a hook on it, leaves the original intact.
    """
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    for name in _HOOK_DICTS:
        if isinstance(getattr(module, name, None), dict):
            setattr(clone, name, type(getattr(module, name))(getattr(module, name)))
    for name, value in list(vars(clone).items()):
        rebound = _rebind(value, module, clone)
        if rebound is not value:
            setattr(clone, name, rebound)
    return clone


def _rebind(value, original: nn.Module, clone: nn.Module):
    """Points an instance-level method bound to ``original`` at ``clone`` instead.

    Wrappers such as accelerate's device hooks replace ``module.forward`` on the instance with
    ``partial(new_forward, module)`` and keep ``module._old_forward`` (a bound method). A shallow copy
    would keep calling the *original* module, i.e. the full layer list: the view would silently be
    the target.
    """
    if isinstance(value, types.MethodType) and value.__self__ is original:
        return types.MethodType(value.__func__, clone)
    if isinstance(value, functools.partial) and value.args and value.args[0] is original:
        rebound = functools.partial(value.func, clone, *value.args[1:], **value.keywords)
        return functools.update_wrapper(rebound, value) if hasattr(value, "__wrapped__") else rebound
    return value


def _install_output_capture_hooks(model: nn.Module, path: list[str]) -> None:
    """Lets the target install transformers' output-capturing hooks before the view is cloned.

    transformers (>= 5) records ``output_hidden_states`` through forward hooks installed lazily, once
    per model object. The decoder layers are shared, so if the *view* installed its own they would
    sit on the target's layers next to the target's, and the target would return every layer's
    hidden state twice. Installing them on the target first (the clones copy its "installed" flag)
    leaves one hook per layer, which serves both: the view then reports the hidden states of its
    retained layers.
    """
    try:
        from transformers.modeling_utils import PreTrainedModel
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:  # other transformers versions return hidden states without hooks
        return
    module = model
    for name in [None, *path]:
        module = module if name is None else module._modules[name]
        if isinstance(module, PreTrainedModel):
            maybe_install_capturing_hooks(module)


def build_routed_view(model: nn.Module, mask: RoutingMask) -> nn.Module:
    """The target with skipped layers replaced by stubs, sharing every weight with ``model``."""
    mask.validate_for(model)
    stack = find_decoder_stack(model)
    path = stack.owner_path.split(".")
    _install_output_capture_hooks(model, path)
    root = _shallow_module_copy(model)
    parent = root
    for name in path:
        child = _shallow_module_copy(parent._modules[name])
        parent._modules[name] = child
        parent = child
    parent._modules[stack.attribute] = nn.ModuleList(
        layer if keep else PassThroughLayer(i) for i, (layer, keep) in enumerate(zip(stack.layers, mask.keep))
    )
    return root


class SlimCache(DynamicCache):
    """A DynamicCache that tolerates empty (skipped) layers.

    Length and mask-size queries name a layer index, usually 0. For a skipped layer we answer from
    the first retained layer of the same cache-layer type (full vs. sliding attention), falling back
    to any retained layer.
    """

    def __init__(self, config, retained: tuple[int, ...]):
        super().__init__(config=config)
        self._retained = tuple(retained)
        self._skipped = set(range(len(self.layers))) - set(retained)

    def _stand_in(self, layer_idx: int) -> int:
        if layer_idx not in self._skipped or layer_idx >= len(self.layers):
            return layer_idx
        wanted = type(self.layers[layer_idx])
        for idx in self._retained:
            if idx < len(self.layers) and type(self.layers[idx]) is wanted:
                return idx
        return self._retained[0]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(self._stand_in(layer_idx))

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return super().get_mask_sizes(query_length, self._stand_in(layer_idx))

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return super().get_query_offset(self._stand_in(layer_idx))


class SlimVerifier:
    """The routed sub-model u of a target q.

    Example::

        slim = SlimVerifier(target, mask)
        cache = slim.new_cache()
        logits = slim.model(input_ids, cache=cache, use_cache=True).logits
    """

    def __init__(self, target: nn.Module, mask: RoutingMask):
        self.target = target
        self.mask = mask
        self.model = build_routed_view(target, mask)

    def new_cache(self) -> SlimCache:
        return SlimCache(self.target.config, self.mask.retained)

    def __repr__(self) -> str:
        return f"SlimVerifier(mask={self.mask}, skipped={list(self.mask.skipped)})"
