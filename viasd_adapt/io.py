"""Writing artifacts and outputs atomically.

A mask, a tuned-settings file or a JSON report that is half written (disk full, a kill, a crash)
must never replace a good one. Everything is written to a temporary file in the same folder and
renamed into place: the rename is atomic on POSIX and Windows, so a reader sees the old file or
the new one, never a truncated mix. New files get the usual permissions (0644 under umask 022).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from viasd_adapt.errors import ViasdError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None], what: str = "file") -> Path:
    """Calls ``write(tmp_path)`` then renames ``tmp_path`` onto ``path``; a failure leaves ``path`` as it was."""
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory")
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
        tmp = Path(name)
        try:
            write(tmp)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    except OSError as err:
        raise ViasdError(f"cannot write {what} {path}: {err.strerror or err}") from None
    return path


def write_text(path: str | os.PathLike, text: str, what: str = "file") -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), what)


def write_json(path: str | os.PathLike, data: Any, what: str = "JSON file") -> Path:
    return write_text(path, json.dumps(data, indent=2) + "\n", what)


def save_figure(figure, path: str | os.PathLike) -> Path:
    """A matplotlib figure as PNG, atomically."""
    return write_atomic(path, lambda tmp: figure.savefig(tmp, dpi=110, format="png"), "plot")


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """A UTF-8 text file, with one clear error for a missing file, a folder, or binary content."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ViasdError(f"{what} {path} is a directory, not a file")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ViasdError(f"{what} not found: {path}") from None
    except UnicodeDecodeError:
        raise ViasdError(f"{what} {path} is not UTF-8 text (a binary file?)") from None
    except OSError as err:
        raise ViasdError(f"cannot read {what} {path}: {err.strerror or err}") from None


__all__ = ["read_text", "save_figure", "write_atomic", "write_json", "write_text"]
