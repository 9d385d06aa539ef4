"""The pluggy markers of the ``viasd_adapt`` project, in a module of their own.

They only tag functions, so the modules that implement hooks (the built-in rules in
:mod:`viasd_adapt.core.rules`, the drafter-quality monitor) can mark their methods without importing
the hook specifications, and :mod:`viasd_adapt.core.hooks` can import those modules without a cycle.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "viasd_adapt"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]
