"""viasd-adapt: a slim-verifier tier (VIA-SD) for existing speculative-decoding frameworks.

The names most programs start from are handed out here, imported on first use so that importing
the package (the ``viasd`` command does, at start-up) loads neither torch nor transformers::

    from viasd_adapt import load_pair, TierSettings, context

``context(target_or_pair, mask=..., settings=..., plugins=...)`` is the one way to configure a run:
every adapter takes the :class:`RunContext` it builds as ``context=``.
"""

from __future__ import annotations

import importlib

from viasd_adapt import deprecated

__version__ = "0.3.0"

#: name -> the module that defines it
_LAZY = {
    "load_pair": "viasd_adapt.models.pair",
    "LoadedPair": "viasd_adapt.models.pair",
    "TierSettings": "viasd_adapt.core.settings",
    "Mode": "viasd_adapt.core.settings",
    "context": "viasd_adapt.engine.context",
    "RunContext": "viasd_adapt.engine.context",
}

__all__ = ["__version__", *_LAZY]

deprecated.install()  # the import paths of 0.2.0 that moved keep working, with a warning, until 0.4.0


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'viasd_adapt' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
