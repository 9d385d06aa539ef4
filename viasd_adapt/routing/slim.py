"""The slim verifier u = q'_z: the target run with the masked-out decoder layers bypassed.

Design (docs/method.md section 2):

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
  pass. The cost is the KV memory of the retained layers, measured by ``viasd bench``. The cache
  class, and why layer 0 needs care in it, is :mod:`viasd_adapt.routing.slim_cache`.
"""

from __future__ import annotations

from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.encdec import decoder_cache_config, seq2seq_cache
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.slim_cache import SlimCache  # noqa: F401 - also importable from here, as before
from viasd_adapt.routing.view import build_layer_view, pass_through_layer
from viasd_adapt.routing.mask import check_mask_layers


def build_routed_view(model: nn.Module, mask: RoutingMask) -> nn.Module:
    """The target with skipped layers replaced by stubs, sharing every weight with ``model``.

    The stubs return what the layer they replace returns (a tensor, or T5's tuple with the shared
    position biases: :func:`~viasd_adapt.routing.view.pass_through_layer`). For an encoder-decoder
    model only decoder layers are skipped; the encoder is shared untouched.
    """
    check_mask_layers(mask, model)
    stack = find_decoder_stack(model)
    return build_layer_view(
        model, [layer if keep else pass_through_layer(stack, i) for i, (layer, keep) in enumerate(zip(stack.layers, mask.keep))]
    )


class SlimVerifier:
    """The routed sub-model u of a target q.

    Example::

        slim = SlimVerifier(target, mask)
        cache = slim.new_cache()
        logits = slim.model(input_ids, cache=cache, use_cache=True).logits
    """

    def __init__(self, target: nn.Module, mask: RoutingMask):
        if not isinstance(mask, RoutingMask):
            raise ConfigError(f"mask must be a RoutingMask (MaskArtifact.load(path).mask for a file), got {type(mask).__name__}")
        self.target = target
        self.mask = mask
        self.model = build_routed_view(target, mask)

    def new_cache(self):
        """An empty cache for the slim view: a :class:`SlimCache`, or for an encoder-decoder target
        an ``EncoderDecoderCache`` with a SlimCache self-attention part
        (:func:`viasd_adapt.routing.encdec.seq2seq_cache`)."""
        if find_decoder_stack(self.target).encoder_decoder:
            return seq2seq_cache(decoder_cache_config(self.target), self.mask.retained)
        return SlimCache(self.target.config, self.mask.retained)

    def __repr__(self) -> str:
        return f"SlimVerifier(mask={self.mask}, skipped={list(self.mask.skipped)})"
