"""Intra-model routing: finding decoder layers, the slim verifier view, the target's runners and
the checks that tie a mask (:mod:`viasd_adapt.config.mask`) to the model it was searched on."""

from viasd_adapt.routing.layers import DecoderStack, find_decoder_stack
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.routing.slim import SlimCache, SlimVerifier

__all__ = ["SlimVerifier"]


def __getattr__(name: str):
    """Names this package handed out in 0.2.0 that moved (:mod:`viasd_adapt.deprecated`)."""
    from viasd_adapt.deprecated import moved_name

    return moved_name(__name__, name)
