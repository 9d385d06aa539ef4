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

from viasd_adapt.errors import UnsupportedModelError
from viasd_adapt.routing.layers import find_decoder_stack


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
        rebound = _rebind(value, module, clone, name)
        if rebound is not value:
            setattr(clone, name, rebound)
    return clone


def _wrapped_method_of(value, original: nn.Module) -> types.MethodType | None:
    """The method of ``original`` that a decorator-style wrapper (``functools.wraps``: a
    ``__wrapped__`` chain) calls, or None."""
    inner = value
    for _ in range(32):
        inner = getattr(inner, "__wrapped__", None)
        if inner is None:
            return None
        if isinstance(inner, types.MethodType):
            return inner if inner.__self__ is original else None
    return None


def _rebind(value, original: nn.Module, clone: nn.Module, name: str = "attribute"):
    """Points an instance-level method bound to ``original`` at ``clone`` instead.

    Wrappers such as accelerate's device hooks replace ``module.forward`` on the instance with
    ``partial(new_forward, module)`` and keep ``module._old_forward`` (a bound method). A shallow copy
    would keep calling the *original* module, i.e. the full layer list: the view would silently be
    the target.

    ``module.forward = torch.compile(module.forward)`` is a wrapper around the original's bound
    method with no way to point it elsewhere; its compiled code is also specialised to the
    original module. The view calls the plain method, rebound (it runs uncompiled; the target
    keeps its compiled forward). Any other wrapper around one of the original's methods is refused:
    the view would either run the full model or drop what the wrapper does.
    (``module.compile()`` needs nothing here: a copied module does not keep its compiled call.)
    """
    if isinstance(value, types.MethodType) and value.__self__ is original:
        return types.MethodType(value.__func__, clone)
    if isinstance(value, functools.partial) and value.args and value.args[0] is original:
        rebound = functools.partial(value.func, clone, *value.args[1:], **value.keywords)
        return functools.update_wrapper(rebound, value) if hasattr(value, "__wrapped__") else rebound
    method = _wrapped_method_of(value, original) if callable(value) else None
    if method is not None:
        if hasattr(value, "_torchdynamo_orig_callable"):  # torch.compile(module.method)
            return types.MethodType(method.__func__, clone)
        raise UnsupportedModelError(
            f"{type(original).__name__}.{name} was replaced on the instance by a wrapper ({getattr(value, '__qualname__', value)!r}) "
            "around the model's own method; a routed view cannot point it at its own layers (it would run the full "
            "model). Remove the wrapper (or define it on the class) before using the slim tier."
        )
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


__all__ = ["PassThroughLayer", "build_layer_view", "view_owner"]
