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
from viasd_adapt.routing.layers import T5_LAYOUT, DecoderStack, find_decoder_stack


class StubLayer(nn.Module):
    """A module standing in for a decoder layer; it must return what the real layer returns.

    Families disagree on a decoder layer's output: most transformers-5 layers (Llama, Qwen, GPT-2,
    GPT-NeoX, ...) return the hidden-states tensor itself, while Bloom, Falcon, GPT-Neo and other
    older designs return a tuple ``(hidden_states, attention_weights)`` that their decoder indexes
    with ``outputs[0]``. A stub that returned a bare tensor there would be indexed along the batch
    dimension and crash (or worse). :func:`build_layer_view` sets :attr:`output_arity` from
    :func:`block_output_arities` (measured, not guessed from the family name); the stub then returns
    ``hidden_states`` alone (``None``) or a tuple of that length with ``None`` after it.
    """

    output_arity: int | None = None

    def as_block_output(self, hidden_states: torch.Tensor):
        if self.output_arity is None:
            return hidden_states
        return (hidden_states,) + (None,) * (self.output_arity - 1)


class PassThroughLayer(StubLayer):
    """A bypassed decoder layer: returns the residual stream unchanged and never touches the cache."""

    def __init__(self, layer_index: int):
        super().__init__()
        self.layer_index = layer_index

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return self.as_block_output(hidden_states)

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
        rebound = _rebind(value, module, clone, name)
        if rebound is not value:
            setattr(clone, name, rebound)
    return clone


# Instance attributes a view's forward goes through; a wrapper there that cannot be re-pointed is refused.
_FORWARD_PATH = frozenset({"forward", "__call__", "_call_impl", "_old_forward"})


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
    keeps its compiled forward). A wrapper around a method the view never runs a forward through
    (accelerate's ``dispatch_model`` wraps ``.to`` and ``.cuda`` to warn about moving a dispatched
    model) is dropped on the view: the view gets the plain method. Any other wrapper around
    ``forward`` is refused: the view would either run the full model or drop what the wrapper does.
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
        if name not in _FORWARD_PATH:  # e.g. accelerate's dispatch_model wraps .to/.cuda to warn
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

    Installing on a model installs on every sub-model below it too, whatever their own flags say.
    So when any model on the path already has its hooks (the target ran a forward with
    ``output_hidden_states`` or ``output_attentions`` before: transformers hooked only the inner
    base model), nothing is installed: installing from the top would hook every layer a second
    time, for good (returned hidden states and attentions would come back twice, also after the
    tier's scope). The view's copies are then marked by :func:`_mark_capture_hooks` instead.
    """
    try:
        from transformers.modeling_utils import PreTrainedModel
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:  # other transformers versions return hidden states without hooks
        return
    models = [m for m in _path_modules(model, path) if isinstance(m, PreTrainedModel)]
    if models and not any(getattr(m, "_output_capturing_hooks_installed", False) for m in models):
        maybe_install_capturing_hooks(models[0])  # the top one: it marks every model below it


def _path_modules(model: nn.Module, path: list[str]) -> list[nn.Module]:
    """``model`` and each module on ``path`` below it, top first."""
    modules = [model]
    for name in path:
        modules.append(modules[-1]._modules[name])
    return modules


def _mark_capture_hooks(original: nn.Module, view: nn.Module, path: list[str]) -> None:
    """When the target's layers already carry output-capturing hooks, marks the view's copies of
    the models on the path as hooked, so a view's forward never installs a second set on the
    shared layers (the target itself is left as it is)."""
    originals, copies = _path_modules(original, path), _path_modules(view, path)
    if any(getattr(m, "_output_capturing_hooks_installed", False) for m in originals):
        for module in copies:
            if hasattr(type(module), "_can_record_outputs") or "_output_capturing_hooks_installed" in module.__dict__:
                module.__dict__["_output_capturing_hooks_installed"] = True


#: Set (True) on a view that runs every layer of the target (q's view under a shared prefix): a
#: forward of it is a full target pass, priced like one (:mod:`viasd_adapt.bench.measure`).
FULL_DEPTH_VIEW = "viasd_full_depth"


def build_layer_view(model: nn.Module, layers: Sequence[nn.Module]) -> nn.Module:
    """``model`` with its decoder-layer list replaced by ``layers`` (one module per layer index),
    sharing every weight with ``model``; ``model`` itself is not modified.

    Every :class:`StubLayer` in ``layers`` is told the output convention of the real layer it
    stands in for (see :func:`block_output_arities`).
    """
    stack = find_decoder_stack(model)
    if len(layers) != stack.num_layers:
        raise ValueError(f"a view needs {stack.num_layers} layers, got {len(layers)}")
    # encoder-decoder stacks have a known convention per layout (see pass_through_layer), and a
    # one-token probe of them would need encoder inputs
    if not stack.encoder_decoder and any(isinstance(layer, StubLayer) for layer in layers):
        arities = block_output_arities(model)
        for original, layer in zip(stack.layers, layers):
            if isinstance(layer, StubLayer):
                layer.output_arity = arities[type(original)]
    return _view(model, stack, layers)


def _view(model: nn.Module, stack: DecoderStack, layers: Sequence[nn.Module]) -> nn.Module:
    path = stack.owner_path.split(".")
    _install_output_capture_hooks(model, path)
    root = _shallow_module_copy(model)
    parent = root
    for name in path:
        child = _shallow_module_copy(parent._modules[name])
        parent._modules[name] = child
        parent = child
    parent._modules[stack.attribute] = nn.ModuleList(layers)
    _mark_capture_hooks(model, root, path)
    return root


# Output convention per decoder-layer class: None (the tensor) or the length of the tuple returned.
_ARITIES: dict[type, int | None] = {}


class _Recorder(nn.Module):
    """Runs a real layer and notes the shape of what it returned (used once per layer class)."""

    def __init__(self, inner: nn.Module, sink: dict):
        super().__init__()
        self.inner, self.sink = inner, sink

    def forward(self, *args, **kwargs):
        out = self.inner(*args, **kwargs)
        self.sink[type(self.inner)] = out
        return out


def block_output_arities(model: nn.Module) -> dict[type, int | None]:
    """What each decoder-layer class of ``model`` returns: ``None`` for the hidden-states tensor
    itself, ``n`` for a tuple of ``n`` whose first item is the hidden states.

    Measured once per layer class with a one-token forward of a weight-sharing view whose layers
    record their outputs (the model is not touched; results are cached by class, so later views
    cost nothing). A layer returning anything else, or a model that cannot run that forward, gets
    an :class:`UnsupportedModelError` naming its family.
    """
    stack = find_decoder_stack(model)
    classes = {type(layer) for layer in stack.layers}
    if not classes <= _ARITIES.keys():
        family = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
        outputs: dict[type, object] = {}
        probe = _view(model, stack, [_Recorder(layer, outputs) for layer in stack.layers])
        device = next(model.parameters()).device
        failure = None
        try:
            with torch.no_grad():
                probe(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=False)
        except Exception as err:  # noqa: BLE001 - any failure means we cannot learn the convention
            failure = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        found = {}
        for cls, out in outputs.items():
            if isinstance(out, torch.Tensor):
                found[cls] = None
            elif isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
                found[cls] = len(out)
            else:
                raise UnsupportedModelError(
                    f"cannot route {type(model).__name__} ({family}): its decoder layer {cls.__name__} returned "
                    f"{type(out).__name__}, not the hidden states (a tensor or a tuple starting with one)"
                )
        if failure is not None or not classes <= found.keys():
            raise UnsupportedModelError(
                f"cannot route {type(model).__name__} ({family}): a one-token test forward, run to learn what its "
                f"decoder layers return, failed ({failure or 'some layers never ran'})"
            )
        _ARITIES.update(found)
    return {cls: _ARITIES[cls] for cls in classes}


def view_owner(view: nn.Module) -> nn.Module:
    """The module of a view (or model) that owns the decoder-layer list: its base decoder, which
    returns hidden states without the LM head."""
    stack = find_decoder_stack(view)
    module = view
    for name in stack.owner_path.split("."):
        module = module._modules[name]
    return module


__all__ = ["FULL_DEPTH_VIEW", "PassThroughLayer", "StubLayer", "T5PassThroughBlock", "block_output_arities", "build_layer_view",
           "pass_through_layer", "view_owner"]
