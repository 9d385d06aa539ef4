"""Where model pairs live: the user's cache of built pairs and the pairs shipped in the package.

A pair directory holds ``target/`` and ``draft/`` (each loadable on its own with
``from_pretrained``), optionally ``eagle_head/`` and ``mask.json`` (written by later steps), and
``build_report.json``. The cache root is ``$VIASD_CACHE`` or ``~/.cache/viasd-adapt``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from viasd_adapt.errors import ViasdError

CACHE_ENV_VAR = "VIASD_CACHE"
DEMO_PAIR = "demo"


@dataclass(frozen=True)
class PairPaths:
    """The files of one pair; ``eagle_head`` and ``mask`` are None until something writes them."""

    name: str
    source: str  # "built" (in the cache) or "shipped" (in the package)
    root: Path
    target: Path
    draft: Path
    eagle_head: Path | None
    mask: Path | None

    def to_json(self) -> dict:
        return {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in self.__dict__.items()
        }


def cache_dir() -> Path:
    """Root of built pairs: ``$VIASD_CACHE`` if set, else ``~/.cache/viasd-adapt``."""
    configured = os.environ.get(CACHE_ENV_VAR)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "viasd-adapt"


def shipped_dir() -> Path:
    """Root of the pairs shipped inside the package (``viasd_adapt/assets``)."""
    return Path(str(resources.files("viasd_adapt"))) / "assets"


def read_pair(root: Path, name: str | None = None, source: str = "built") -> PairPaths | None:
    """The pair in ``root``, or None if ``root`` lacks a loadable target or draft."""
    root = Path(root)
    target, draft = root / "target", root / "draft"
    if not ((target / "config.json").is_file() and (draft / "config.json").is_file()):
        return None
    eagle_head, mask = root / "eagle_head", root / "mask.json"
    return PairPaths(
        name=name or root.name,
        source=source,
        root=root,
        target=target,
        draft=draft,
        eagle_head=eagle_head if eagle_head.is_dir() else None,
        mask=mask if mask.is_file() else None,
    )


def _pairs_under(root: Path, source: str) -> list[PairPaths]:
    if not root.is_dir():
        return []
    # hidden folders are builds in progress or put aside (models build stages in ".<name>-building-*")
    found = (read_pair(child, source=source) for child in sorted(root.iterdir())
             if child.is_dir() and not child.name.startswith("."))
    return [pair for pair in found if pair is not None]


def list_pairs() -> list[PairPaths]:
    """Every built pair (cache) followed by every shipped pair (package), each sorted by name."""
    return _pairs_under(cache_dir(), "built") + _pairs_under(shipped_dir(), "shipped")


def resolve_pair(name: str) -> PairPaths:
    """The pair called ``name``, or a directory holding a pair.

    A pair built in the cache wins over a shipped pair of the same name, so that rebuilding
    ``demo`` locally is how a user replaces the shipped weights.
    """
    if os.sep in name or "/" in name:
        pair = read_pair(Path(name).expanduser(), source="path")
        if pair is None:
            raise ViasdError(f"{name} is not a pair directory (needs target/ and draft/ with config.json)")
        return pair
    for pair in list_pairs():
        if pair.name == name:
            return pair
    known = sorted({pair.name for pair in list_pairs()})
    raise ViasdError(
        f"no model pair named {name!r} (known: {', '.join(known) or 'none'}); "
        f"build one with `viasd models build --preset {name}`"
    )


def demo_pair_paths() -> PairPaths:
    """The demo pair shipped with the package (never a locally rebuilt one)."""
    pair = read_pair(shipped_dir() / DEMO_PAIR, name=DEMO_PAIR, source="shipped")
    if pair is None:
        raise ViasdError(
            f"the shipped demo pair is missing from {shipped_dir() / DEMO_PAIR}; "
            "reinstall viasd-adapt or run `viasd models build --preset demo`"
        )
    return pair
