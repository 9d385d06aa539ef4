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
import random
from pathlib import Path

from viasd_adapt.errors import ConfigError, ViasdError
# The files, their train/held-out split and the held-out snippet draw live with the prompts (torch-free,
# and the prompts room may not import models); the corpus re-exports them for its own readers.
from viasd_adapt.prompts.stdlib import (  # noqa: F401
    EXCLUDED_DIRS,
    HELDOUT_PERCENT,
    SourceFile,
    corpus_files,
    draw_until,
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


def heldout_next_lines(
    n: int,
    seed: int = 0,
    context_lines: int = 12,
    min_line_chars: int = 8,
    max_line_chars: int = 80,
    root: Path | None = None,
) -> list[tuple[str, str]]:
    """``n`` (prefix, next line) pairs from held-out files: a task score for code models.

    The prefix is up to ``context_lines`` whole lines, *without* the line break after the last one:
    byte-level BPE merges a line break with the next line's indentation into one token, so a
    prompt ending in a bare line break would ask the model to continue from a token boundary it
    never saw in training. The model writes that line break itself, then the line. The next line is
    the file's true following line (indentation kept, trailing whitespace removed), of
    ``min_line_chars``..``max_line_chars`` characters, not blank and not a comment. Reproducible for
    a given ``(n, seed)`` and stdlib, like :func:`heldout_prompts`.
    """
    if n < 0:
        raise ConfigError(f"number of prompts must be >= 0, got {n}")
    _, heldout = split_files(root)
    files = [lines for lines in (f.read().splitlines() for f in heldout) if len(lines) > context_lines]
    if not files:
        raise ViasdError("the held-out split is empty")
    rng = random.Random(seed)

    def draw() -> tuple[str, str] | None:
        lines = rng.choice(files)
        index = rng.randrange(context_lines, len(lines))
        line = lines[index].rstrip()
        if not min_line_chars <= len(line.strip()) <= max_line_chars or line.lstrip().startswith("#"):
            return None
        prefix = "\n".join(lines[index - context_lines : index])
        return (prefix, line) if prefix.strip() else None

    return draw_until(n, draw, "held-out next-line examples")


def heldout_text(root: Path | None = None) -> list[str]:
    """The full text of every held-out file, in sorted order (for held-out loss)."""
    _, heldout = split_files(root)
    return [f.read() for f in heldout]


__all__ = ["EXCLUDED_DIRS", "HELDOUT_PERCENT", "SourceFile", "corpus_files", "corpus_fingerprint", "heldout_next_lines",
           "heldout_prompts", "heldout_text", "is_heldout", "split_files", "stdlib_root"]
