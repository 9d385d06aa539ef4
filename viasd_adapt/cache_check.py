"""What a cache does with what it reads back: check it, and regenerate what fails the check.

viasd-adapt keeps slow results between runs (the search's greedy windows, the distillation
answers, completed EAGLE heads, dequantized GGUF models). A cache entry is keyed by its inputs,
but a key says nothing about the bytes under it: one flipped bit inside a stored tensor leaves a
zip archive readable, and a hand-edited token id is a valid token id. So every entry is written
with a digest of its content (:func:`tensors_digest`), and a reader checks the digest and the
shape, dtype and range of what it is about to use before using it. An entry that fails is
*unusable*, never an error: the cache says so in one line (:func:`report_unusable`) and the
caller regenerates it, exactly as on a miss.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Callable, Mapping

import torch


class CacheEntryWarning(UserWarning):
    """A cache entry (or a whole cache file) failed its check and is being regenerated."""


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """A sha256 of named tensors: each name, dtype, shape and byte content, in name order.

    Any changed bit, a changed dtype or shape, or a renamed tensor gives another digest."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{data.dtype}:{tuple(data.shape)};".encode())
        if data.numel():
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def report_unusable(what: str, why: str, say: Callable[[str], None] | None = None, stacklevel: int = 3) -> None:
    """Says, in one line, that ``what`` (a cache entry or file) is unusable because ``why`` and is
    regenerated: through ``say`` when given (a command's own output), else as a
    :class:`CacheEntryWarning`."""
    message = f"viasd-adapt: {what} is unusable ({why}); regenerating it"
    if say is not None:
        say(message)
    else:
        warnings.warn(message, CacheEntryWarning, stacklevel=stacklevel)


__all__ = ["CacheEntryWarning", "report_unusable", "tensors_digest"]
