"""A :class:`~viasd_adapt.engine.verifier.TieredVerifier` for a bare target, as the tests build one.

Many tests verify with a target, settings and a slim verifier they built themselves, not with a
loaded pair. The verifier's 0.2 constructor took those fields and is deprecated; this builds the
same verifier through a verify step (:func:`viasd_adapt.engine.verifier.step_for_fields`, a run
context's step), which is how every run's verifier is built. Same parameters, in the same order,
as the 0.2 constructor.
"""

from __future__ import annotations

from viasd_adapt.engine.verifier import TieredVerifier, step_for_fields


def tiered_verifier(target, settings, sampling, slim=None, plugin_manager=None, framework="hf",
                    bonus_after_block=True, share_prefix=True, runners=None, step=None, adaptive=None) -> TieredVerifier:
    """``TieredVerifier(target, settings, sampling, ...)`` without the deprecated form: the step is
    built from the fields first (a ``step`` given is used as is, and ``settings`` checked against it)."""
    if step is None:
        step = step_for_fields(target, settings, sampling, slim, plugin_manager, framework,
                               bonus_after_block=bonus_after_block, adaptive=adaptive)
        settings = None
    return TieredVerifier(target, settings, sampling, slim=slim, share_prefix=share_prefix, runners=runners, step=step)


__all__ = ["tiered_verifier"]
