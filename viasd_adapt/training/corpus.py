"""The training corpus: the running interpreter's standard-library Python source.

Why this corpus: no machine here can download data, but every Python install carries a few
megabytes of real, varied, well-written code in its standard library. It is large enough to train
small models that produce plausible code, and it is the same everywhere for a given CPython
version (the demo weights were trained on CPython 3.11.7).

The files, their train/held-out split (per whole file, by a hash of its path) and the held-out
snippets drawn as prompts are :mod:`viasd_adapt.prompts.stdlib`'s (the prompts room may not import
models); this module adds what training and evaluation read: the corpus fingerprint, the next-line
task and the held-out text.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The files, their train/held-out split and the held-out draws (snippets, next lines) live with the
# prompts (torch-free, and the prompts room imports no other room); the corpus re-exports them.
from viasd_adapt.prompts.stdlib import (  # noqa: F401
    EXCLUDED_DIRS,
    HELDOUT_PERCENT,
    SourceFile,
    corpus_files,
    draw_until,
    heldout_next_lines,
    heldout_prompts,
    is_heldout,
    split_files,
    stdlib_root,
)


def corpus_fingerprint(files: list[SourceFile]) -> str:
    """A short hash of the file names and contents, recorded in build reports.

    Two builds with the same fingerprint and seed trained on exactly the same text.
    """
    digest = hashlib.sha256()
    for source in files:
        digest.update(source.relative_path.encode("utf-8") + b"\0")
        digest.update(source.read().encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def heldout_text(root: Path | None = None) -> list[str]:
    """The full text of every held-out file, in sorted order (for held-out loss)."""
    _, heldout = split_files(root)
    return [f.read() for f in heldout]


__all__ = ["EXCLUDED_DIRS", "HELDOUT_PERCENT", "SourceFile", "corpus_files", "corpus_fingerprint", "heldout_next_lines",
           "heldout_prompts", "heldout_text", "is_heldout", "split_files", "stdlib_root"]
