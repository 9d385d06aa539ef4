"""Opening a tier: the names of 0.2's set-up call, kept for code that imports them from here.

The set-up every adapter runs is :func:`viasd_adapt.engine.context.open_context`, which returns a
:class:`~viasd_adapt.engine.context.RunContext`; ``open_tier`` and ``OpenTier`` are those.
"""

from __future__ import annotations

from viasd_adapt.engine.context import (EAGLE_HEAD, NO_MASK_MESSAGE, RunContext, UntieredWithoutMaskWarning,
                                        check_spec_model, drafter_identity, open_context, tuned_drafter_mismatch)

#: 0.2's name of the run context.
OpenTier = RunContext
#: 0.2's name of the set-up call.
open_tier = open_context

__all__ = ["EAGLE_HEAD", "NO_MASK_MESSAGE", "OpenTier", "UntieredWithoutMaskWarning", "check_spec_model",
           "drafter_identity", "open_tier", "tuned_drafter_mismatch"]
