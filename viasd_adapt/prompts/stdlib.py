"""Held-out standard-library snippets: the prompts of the project's own code pairs.

Why this source: no machine here can download data, but every Python install carries a few
megabytes of real, varied, well-written code in its standard library. The demo pairs were trained
on it (:mod:`viasd_adapt.training.corpus`), so their prompts come from the files held out of training.

Choices that keep the files and the split reproducible across machines:

* only ``*.py`` files under ``sysconfig.get_paths()["stdlib"]``;
* ``site-packages`` is excluded (it differs per environment);
* test directories (``test``, ``tests``, ``idle_test``) are excluded, because many distributions
  strip them (Debian's python3 does), and the test suite is repetitive boiler-plate anyway;
* files are visited in sorted order of their path relative to the stdlib root;
* the train/held-out split is decided per WHOLE FILE by a hash of its relative path, so a file
  never leaks half into training and half into evaluation, and adding or removing one file (a
  different patch release) never moves the others between splits.

Which snippets each command draws (the seeds that keep them apart) is
:mod:`viasd_adapt.prompts.splits`' business; this module only draws.
"""

from __future__ import annotations

import hashlib
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from viasd_adapt.errors import ConfigError, ViasdError

T = TypeVar("T")

# Directory names that are never part of the corpus (see module docstring).
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})

# Percentage of files (by path hash) held out for evaluation and prompts.
HELDOUT_PERCENT = 5


@dataclass(frozen=True)
class SourceFile:
    """One corpus file: its path relative to the stdlib root (the stable key) and where it lies."""

    relative_path: str
    path: Path

    def read(self) -> str:
        """The file's text; undecodable bytes are replaced so one odd file cannot stop a build."""
        return self.path.read_text(encoding="utf-8", errors="replace")


def stdlib_root() -> Path:
    """The standard-library directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(relative_path: str) -> bool:
    """Whether a file belongs to the held-out split; a pure function of its relative path."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 100 < HELDOUT_PERCENT


def corpus_files(root: Path | None = None) -> list[SourceFile]:
    """All corpus files in deterministic (sorted relative-path) order."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise ViasdError(f"standard-library directory not found: {root}")
    files = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in relative.parts[:-1]):
            continue
        if path.is_file():
            files.append(SourceFile(relative.as_posix(), path))
    files.sort(key=lambda f: f.relative_path)
    if not files:
        raise ViasdError(f"no Python source files found under {root}")
    return files


def split_files(root: Path | None = None) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, held-out) lists of whole files, each in sorted order."""
    files = corpus_files(root)
    train = [f for f in files if not is_heldout(f.relative_path)]
    heldout = [f for f in files if is_heldout(f.relative_path)]
    return train, heldout


def heldout_prompts(
    n: int,
    seed: int = 0,
    min_chars: int = 200,
    max_chars: int = 400,
    root: Path | None = None,
) -> list[str]:
    """``n`` code snippets taken from held-out files.

    Each snippet is a run of whole lines starting at a random line of a random held-out file, cut
    to at most ``max_chars`` characters and at least ``min_chars`` (shorter candidates are
    redrawn). The same ``(n, seed, ...)`` and the same stdlib always give the same list, and the
    list for a larger ``n`` starts with the list for a smaller one.
    """
    if n < 0:
        raise ConfigError(f"number of prompts must be >= 0, got {n}")
    if not 0 < min_chars <= max_chars:
        raise ConfigError(f"need 0 < min_chars <= max_chars, got {min_chars}, {max_chars}")
    _, heldout = split_files(root)
    texts = [lines for lines in (f.read().splitlines(keepends=True) for f in heldout) if lines]
    if not texts:
        raise ViasdError("the held-out split is empty")
    rng = random.Random(seed)

    def draw() -> str | None:
        lines = rng.choice(texts)
        snippet = ""
        for line in lines[rng.randrange(len(lines)):]:
            if len(snippet) + len(line) > max_chars:
                break
            snippet += line
        return snippet if len(snippet) >= min_chars and snippet.strip() else None

    return draw_until(n, draw, f"held-out snippets of {min_chars}-{max_chars} characters")


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


def draw_until(n: int, draw: Callable[[], T | None], what: str) -> list[T]:
    """``n`` accepted draws (``draw`` returns None to reject); gives up with a clear error after
    1000 attempts per wanted item, so an impossible request cannot loop forever."""
    found: list[T] = []
    attempts = 0
    while len(found) < n:
        attempts += 1
        if attempts > 1000 * (n + 1):
            raise ViasdError(f"could not find {n} {what}")
        item = draw()
        if item is not None:
            found.append(item)
    return found


__all__ = ["EXCLUDED_DIRS", "HELDOUT_PERCENT", "SourceFile", "corpus_files", "draw_until", "heldout_next_lines",
           "heldout_prompts", "is_heldout", "split_files", "stdlib_root"]
