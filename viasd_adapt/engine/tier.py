"""0.2's module of the set-up call, kept until 0.4.0 for code that imports from it.

The set-up every adapter runs is :func:`viasd_adapt.engine.context.open_context`, which returns a
:class:`~viasd_adapt.engine.context.RunContext`; ``open_tier`` and ``OpenTier`` were their 0.2
names. Each name here is handed out from :mod:`viasd_adapt.engine.context` with a
:class:`DeprecationWarning` naming it there (:data:`viasd_adapt.deprecated.RENAMED_NAMES`).
"""

from __future__ import annotations

from viasd_adapt.deprecated import renamed_name


def __getattr__(name: str):
    return renamed_name(__name__, name)
