"""Giving freed memory back to the operating system between the long stages of a run.

Why: glibc's allocator keeps memory a process has freed for its own later use. After a GGUF file is
dequantized (a float32 copy of every weight, freed once the cache is written) a process at the shape
of Qwen2-0.5B held 2.5 GB it no longer used, and the greedy generation of the mask search's windows
left more: resident memory that counts against a user's machine, and that the next stage's
allocations do not reuse in full. ``malloc_trim(0)`` hands the free pages back. Elsewhere (another
C library, another system) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import lru_cache


@lru_cache(maxsize=1)
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


def release_free_memory() -> bool:
    """Collects garbage and returns the allocator's free pages to the system; whether it could
    (True on glibc). Cheap (milliseconds): call it where a stage has freed a large working set."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


__all__ = ["release_free_memory"]
