"""Writing artifacts and outputs atomically.

A mask, a tuned-settings file or a JSON report that is half written (disk full, a kill, a crash)
must never replace a good one. Everything is written to a temporary file in the same folder and
renamed into place: the rename is atomic on POSIX and Windows, so a reader sees the old file or
the new one, never a truncated mix. New files get the usual permissions (0644 under umask 022).
"""

from __future__ import annotations

import json
import os
import shutil
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


def write_directory(path: str | os.PathLike, write: Callable[[Path], None], what: str = "directory") -> Path:
    """Calls ``write(tmp_dir)`` on a new directory beside ``path``, then puts it in place of ``path``.

    For artifacts made of several files (a head's weights and config, ``save_pretrained``): a
    reader never sees a mix of old and new files, and a failure leaves ``path`` as it was. An
    existing ``path`` is moved aside and deleted only once the new one is in place (there is a
    moment with no ``path``, never one with a half-written one). New directories get 0777 & ~umask.
    """
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(20, "exists and is not a directory")
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        old = None
        try:
            write(tmp)
            os.chmod(tmp, 0o777 & ~_umask())
            if path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
                os.replace(path, old / path.name)
            os.replace(tmp, path)
        except BaseException:
            if old is not None and not path.exists():
                os.replace(old / path.name, path)  # put the previous version back
            raise
        finally:
            for leftover in (tmp, old):
                if leftover is not None and leftover.exists():
                    shutil.rmtree(leftover, ignore_errors=True)
    except OSError as err:
        raise ViasdError(f"cannot write {what} {path}: {err.strerror or err}") from None
    return path


def write_text(path: str | os.PathLike, text: str, what: str = "file") -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), what)


def write_json(path: str | os.PathLike, data: Any, what: str = "JSON file") -> Path:
    return write_text(path, json.dumps(data, indent=2) + "\n", what)


def save_figure(figure, path: str | os.PathLike, dpi: int = 110) -> Path:
    """A matplotlib figure, atomically, in the format its suffix names (``.png`` when it has none).

    The temporary file has another suffix, so the format is passed explicitly."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    return write_atomic(path, lambda tmp: figure.savefig(tmp, dpi=dpi, format=fmt), "plot")


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


__all__ = ["read_text", "save_figure", "write_atomic", "write_directory", "write_json", "write_text"]
