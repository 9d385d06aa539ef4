"""The project's warnings as tests expect them: one ``pytest.warns`` per kind, with the sentence it
must say, so that a test that provokes a warning asserts it and every other project warning fails
the suite (pyproject.toml turns them into errors).

* :func:`junk_drafter_warning`: the drafter-quality monitor
  (:class:`~viasd_adapt.core.monitor.ViasdQualityWarning`) on a lossy run whose drafter looks
  unrelated to the target. The tiny test pairs are such pairs: their slim verifiers are nearly
  flat, so the drafts gate 1 commits are their argmax about half the time or less; and the monitor
  also judges every draft gate 1 judged (20 or more, 40 for EAGLE), which the tiny EAGLE heads and
  some tiny layer-skipped drafters fail.
* :func:`untiered_without_mask_warning`: an adapter set up with no mask and no settings
  (:class:`~viasd_adapt.engine.context.UntieredWithoutMaskWarning`), which runs untiered SD.
* :func:`negative_delta_warning`: a lossy or audit tier opened on a mask whose searched Delta(u) is
  negative (:class:`~viasd_adapt.config.advice.NegativeDeltaWarning`), as the shipped demo mask's is.
"""

from __future__ import annotations

import contextlib

import pytest

from viasd_adapt.config.advice import NegativeDeltaWarning
from viasd_adapt.core.monitor import ViasdQualityWarning


def junk_drafter_warning(framework: str, expected: bool = True):
    """Expects the monitor's warning from a lossy run of ``framework`` (the name it reports:
    engine, hf, pearl, eagle); with ``expected=False``, expects nothing (a context that does nothing)."""
    if not expected:
        return contextlib.nullcontext()
    return pytest.warns(ViasdQualityWarning, match=rf"^viasd-adapt \({framework}\): lossy mode committed \d+ draft tokens "
                                                   r"through gate 1, but .* the drafter looks unrelated to the target")


def negative_delta_warning(expected: bool = True):
    """Expects the Delta rule's warning on opening a lossy or audit tier (with ``expected=False``: nothing)."""
    if not expected:
        return contextlib.nullcontext()
    return pytest.warns(NegativeDeltaWarning, match=r"^viasd-adapt: Delta\(u\) = -\d+(\.\d+)? < 0 .*the routed path "
                                                    r"p -> u -> q costs more than q checking p directly")


def untiered_without_mask_warning():
    """Expects the first-run rule's warning: an adapter set up with no mask and no settings runs untiered."""
    from viasd_adapt.engine.context import UntieredWithoutMaskWarning

    return pytest.warns(UntieredWithoutMaskWarning, match=r"^viasd-adapt: no mask and no settings given, so this runs "
                                                          r"untiered SD \(mode none")


__all__ = ["junk_drafter_warning", "negative_delta_warning", "untiered_without_mask_warning"]
