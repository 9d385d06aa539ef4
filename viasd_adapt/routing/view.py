"""Weight-sharing views of a decoder model: the same model object graph with a different layer list.

A view is a shallow copy of the modules on the path from the top model down to the decoder-layer
list, with a new ``nn.ModuleList`` in place of the layer list. Every parameter and buffer is shared
with the original, which is never touched: a forward of the original running at the same time in
another thread (PEARL) is unaffected, and there is nothing to patch or restore.

The slim verifier (:mod:`viasd_adapt.routing.slim`) is the view whose skipped layers are
:class:`PassThroughLayer` stubs; the shared-prefix runners (:mod:`viasd_adapt.routing.shared`)
build views that capture or inject the residual stream at one layer.
"""

from __future__ import annotations

import copy
import functools
import types
from typing import Sequence

import torch
from torch import nn

from viasd_adapt.routing.layers import T5_LAYOUT, DecoderStack, find_decoder_stack


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


class T5PassThroughBlock(nn.Module):
    """A bypassed T5 decoder block: the residual stream and the shared position biases pass through.

    A T5 block returns ``(hidden, self_attention_position_bias, cross_attention_position_bias)``
    and the stack hands the biases to the next block. The *first* block is the one holding the
    relative-position embedding: it computes the bias every later block reuses (T5 shares one
    positional scheme across layers). Skipping block 0 means skipping its attention and MLP, not
    the model's notion of position, so the stub at index 0 still computes that bias from block 0's
    embedding (``bias_attention``), for the queries of this forward after whatever the cache holds,
    exactly as block 0's attention would. Without it every retained block would see a zero bias:
    no positional information at all. Stubs at other indices pass the biases they are given.
    The cross-attention bias is left as given: T5 has no learned cross-attention bias, and the first
    retained block builds its (zero) bias itself when it is None.
    """

    def __init__(self, layer_index: int, bias_attention: nn.Module | None = None):
        super().__init__()
        self.layer_index = layer_index
        self.bias_attention = bias_attention

    def forward(self, hidden_states: torch.Tensor, attention_mask=None, position_bias=None, encoder_hidden_states=None,
                encoder_attention_mask=None, encoder_decoder_position_bias=None, cache=None, **kwargs):
        if position_bias is None and self.bias_attention is not None:
            past = int(cache.get_seq_length(self.layer_index)) if cache is not None else 0
            length = hidden_states.shape[1]
            position_bias = self.bias_attention.compute_bias(length, past + length, device=hidden_states.device,
                                                             past_seen_tokens=past).to(hidden_states.dtype)
        return hidden_states, position_bias, encoder_decoder_position_bias

    def extra_repr(self) -> str:
        return f"skipped_layer={self.layer_index}"


def pass_through_layer(stack: DecoderStack, index: int) -> nn.Module:
    """The stub that bypasses layer ``index`` of ``stack``, returning what that layer returns."""
    if stack.layout == T5_LAYOUT:
        first = stack.layers[0].layer[0].SelfAttention
        return T5PassThroughBlock(index, first if index == 0 and first.has_relative_attention_bias else None)
    return PassThroughLayer(index)


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


def build_layer_view(model: nn.Module, layers: Sequence[nn.Module]) -> nn.Module:
    """``model`` with its decoder-layer list replaced by ``layers`` (one module per layer index),
    sharing every weight with ``model``; ``model`` itself is not modified."""
    stack = find_decoder_stack(model)
    if len(layers) != stack.num_layers:
        raise ValueError(f"a view needs {stack.num_layers} layers, got {len(layers)}")
    path = stack.owner_path.split(".")
    _install_output_capture_hooks(model, path)
    root = _shallow_module_copy(model)
    parent = root
    for name in path:
        child = _shallow_module_copy(parent._modules[name])
        parent._modules[name] = child
        parent = child
    parent._modules[stack.attribute] = nn.ModuleList(layers)
    return root


def view_owner(view: nn.Module) -> nn.Module:
    """The module of a view (or model) that owns the decoder-layer list: its base decoder, which
    returns hidden states without the LM head."""
    stack = find_decoder_stack(view)
    module = view
    for name in stack.owner_path.split("."):
        module = module._modules[name]
    return module


__all__ = ["PassThroughLayer", "T5PassThroughBlock", "build_layer_view", "pass_through_layer", "view_owner"]
