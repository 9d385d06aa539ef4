"""Warnings as values: what a resolver has to say, said once, at the edge.

The functions that decide what a run uses (:func:`viasd_adapt.config.resolve.read_settings`,
:func:`viasd_adapt.engine.context.resolve_context`) are pure: they return a :class:`Notice` for
each thing a user should hear (tuned settings set aside, a mask whose Delta is negative) instead
of calling :func:`warnings.warn` in the middle of the decision. The edge that read the files and
called them (an adapter's set-up call, a command) hands the notices to :func:`emit`.

Why: a warning raised mid-way needs a ``stacklevel`` that counts the frames between it and the
user, and every signature on the way had to pass one on. :func:`emit` instead names the first
frame outside the library and its plumbing (pluggy, torch, transformers, eagle, contextlib,
threads), wherever it is called from.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

#: The library's own folders (the package, and the adapters folder it links to) and the plumbing
#: between them and the user's line.
_PACKAGE = Path(__file__).resolve().parent.parent
_LIBRARY_FOLDERS = tuple(str(path) + os.sep for path in {_PACKAGE, (_PACKAGE / "adapters").resolve(), _PACKAGE / "adapters"})
_PLUMBING_PARTS = (os.sep + "pluggy" + os.sep, os.sep + "torch" + os.sep, os.sep + "transformers" + os.sep,
                   os.sep + "eagle" + os.sep, os.sep + "contextlib.py", os.sep + "threading.py",
                   os.sep + "concurrent" + os.sep)


@dataclass(frozen=True)
class Notice:
    """One warning to give: its category and its sentence."""

    category: type[Warning]
    message: str


def _inside_library(filename: str) -> bool:
    return filename.startswith(_LIBRARY_FOLDERS) or any(part in filename for part in _PLUMBING_PARTS)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn` called in the caller of this function that names
    the first frame outside viasd-adapt and the plumbing it runs in: the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _inside_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def emit(notices: Iterable[Notice]) -> None:
    """Gives each notice as a warning that names the user's line."""
    for notice in notices:
        warnings.warn(notice.message, notice.category, stacklevel=caller_stacklevel())


__all__ = ["Notice", "caller_stacklevel", "emit"]
