"""Intra-model routing: finding decoder layers, routing masks, and the slim verifier view."""

from viasd_adapt.routing.layers import DecoderStack, find_decoder_stack
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, model_fingerprint
from viasd_adapt.routing.slim import SlimCache, SlimVerifier

__all__ = [
    "DecoderStack",
    "MaskArtifact",
    "RoutingMask",
    "SlimCache",
    "SlimVerifier",
    "find_decoder_stack",
    "model_fingerprint",
]
