"""Writing artifacts and outputs atomically.

A mask, a tuned-settings file or a JSON report that is half written (disk full, a kill, a crash)
must never replace a good one. Everything is written to a temporary file in the same folder and
renamed into place: the rename is atomic on POSIX and Windows, so a reader sees the old file or
the new one, never a truncated mix.

Permissions follow the process umask, as pip's and the Hugging Face hub's caches do (0644 files and
0755 folders under umask 022; under 002, shared with the group): what viasd-adapt writes, caches
under ``$VIASD_CACHE`` included, can be shared with other users of a machine. Temporary files and
folders are made private (``mkstemp``: 0600, ``mkdtemp``: 0700), and some writers make theirs so
too (safetensors writes its files 0600): every file and folder a writer leaves is given the
umask's mode before it is renamed into place (:func:`follow_umask`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from viasd_adapt.errors import ViasdError


def process_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike) -> None:
    """Gives ``path`` (a file, or a folder and everything in it) the modes the umask gives new ones:
    ``0o666 & ~umask`` for files (``0o777`` for those their owner may execute), ``0o777 & ~umask``
    for folders. Links are left alone."""
    mask = process_umask()

    def chmod(entry: Path) -> None:
        if entry.is_symlink():
            return
        executable = entry.is_dir() or entry.stat().st_mode & 0o100
        os.chmod(entry, (0o777 if executable else 0o666) & ~mask)

    root = Path(path)
    chmod(root)
    if root.is_dir() and not root.is_symlink():
        for folder, folders, files in os.walk(root):
            for name in folders + files:
                chmod(Path(folder) / name)


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None], what: str = "file") -> Path:
    """Calls ``write(tmp_path)`` then renames ``tmp_path`` onto ``path``; a failure leaves ``path`` as it was.

    Only a regular file (or a new path) is replaced. A symbolic link is followed: its target is
    written and the link stays. A FIFO, a character device (``/dev/null``) or a process's own
    descriptor (``/dev/stdout``, ``/dev/fd/N``) is written through, as a shell's ``>`` would (see
    :func:`output_kind`); anything else (a folder, a block device, a socket) is refused by name.
    """
    path = Path(path).expanduser()
    try:
        kind = output_kind(path)
        if kind == THROUGH:
            return _write_through(path, write)
        if kind != REGULAR:
            raise ViasdError(f"cannot write {what} {path}: it is {kind}, not a regular file; give a file path")
        path = _followed(path)
        _make_parent(path, what)
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
        tmp = Path(name)
        try:
            write(tmp)
            follow_umask(tmp)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    except OSError as err:
        raise ViasdError(f"cannot write {what} {path}: {err.strerror or err}") from None
    return path


#: :func:`output_kind` of a path written by a rename (a regular file, or none yet).
REGULAR = "a regular file"
#: :func:`output_kind` of a path written through (a FIFO, a character device, a descriptor).
THROUGH = "written through"
_DESCRIPTOR_FOLDERS = ("/dev/fd", "/proc/self/fd")
_DESCRIPTOR_NAMES = ("/dev/stdin", "/dev/stdout", "/dev/stderr")


def output_kind(path: str | os.PathLike) -> str:
    """How an output ``path`` is written: :data:`REGULAR` (a regular file, a new path, or a link to
    either: replaced atomically), :data:`THROUGH` (a FIFO, a character device such as ``/dev/null``,
    or a descriptor such as ``/dev/stdout``: opened and written, never replaced, since a rename would
    put a regular file in place of the node and a reader waiting on it would get nothing), or else
    what it is (``"a directory"``, ``"a block device"``, ``"a socket"``), which is refused."""
    import stat

    path = Path(path).expanduser()
    if str(path) in _DESCRIPTOR_NAMES or str(path.parent) in _DESCRIPTOR_FOLDERS:
        return THROUGH  # a descriptor: even one redirected to a file is that file's open handle
    try:
        mode = os.stat(path).st_mode  # follows links
    except FileNotFoundError:
        return REGULAR
    except NotADirectoryError:
        return REGULAR  # the caller's folder check names the file in the way
    if stat.S_ISREG(mode):
        return REGULAR
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return THROUGH
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _followed(path: Path) -> Path:
    """``path``, or, for a symbolic link, the file it names (which is replaced; the link stays)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _write_through(path: Path, write: Callable[[Path], None]) -> Path:
    """``write`` into a private temporary file, then its bytes into ``path`` (opened for appending,
    so a descriptor redirected to a file keeps what was written before). A failed write or close
    (``/dev/full``: no space left) raises, so nothing says the output was written when it was not."""
    folder = tempfile.mkdtemp(prefix=".viasd-through-")
    try:
        tmp = Path(folder) / path.name
        write(tmp)
        with open(tmp, "rb") as source, open(path, "ab") as sink:
            shutil.copyfileobj(source, sink)
            sink.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return path


def make_folder(path: str | os.PathLike, what: str = "folder") -> Path:
    """Creates ``path`` (and its parents) unless it is a folder already; the one way the product makes
    a folder, so that every failure is one line naming the folder and the reason: a read-only file
    system, permission denied, or a file where a folder should be (the file is named)."""
    import errno

    path = Path(path).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ViasdError(f"cannot create the {what} {path}: {_file_in_the_way(path)} is a file, not a folder") from None
    except OSError as err:
        reason = {errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied", errno.ENOSPC: "no space left on the device"}.get(err.errno)
        raise ViasdError(f"cannot create the {what} {path}: {reason or err.strerror or err}") from None
    return path


def _make_parent(path: Path, what: str) -> None:
    """The folder ``path`` is written in, made by :func:`make_folder`; its failure said as the write's."""
    try:
        make_folder(path.parent, "folder")
    except ViasdError as err:
        raise ViasdError(f"cannot write {what} {path}: {err}") from None


def _file_in_the_way(path: Path) -> Path:
    """The nearest ancestor of ``path`` (or ``path``) that exists and is not a folder."""
    for candidate in (path, *path.parents):
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return path


def write_directory(path: str | os.PathLike, write: Callable[[Path], None], what: str = "directory") -> Path:
    """Calls ``write(tmp_dir)`` on a new directory beside ``path``, then puts it in place of ``path``.

    For artifacts made of several files (a head's weights and config, ``save_pretrained``): a
    reader never sees a mix of old and new files, and a failure leaves ``path`` as it was. An
    existing ``path`` is moved aside and deleted only once the new one is in place (there is a
    moment with no ``path``, never one with a half-written one). The folder and everything written
into it get the umask's modes (:func:`follow_umask`), whatever modes ``write`` left.
    """
    path = Path(path).expanduser()
    try:
        _make_parent(path, what)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(20, "exists and is not a directory")
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent))
        old = None
        try:
            write(tmp)
            follow_umask(tmp)
            if path.exists():
                old = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path), suffix=".old", dir=path.parent))
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


def _temporary_prefix(path: Path) -> str:
    """``.<name>.pid<PID>.``: a temporary folder names the process that made it, so a later run can
    tell one a killed process left behind (:func:`sweep_stale_temporaries`) from one in progress."""
    return f".{path.name}.pid{os.getpid()}."


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


#: Temporary folders of writers that predate the pid in their name are swept once this old (seconds).
LEGACY_TEMPORARY_AGE = 24 * 3600


def sweep_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Removes the temporary folders :func:`write_directory` left in ``folder`` when its process was
    killed mid-write (their process no longer runs); returns what was removed. A write in progress
    (its process alive) is left alone."""
    import re
    import time

    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for entry in folder.iterdir():
        if not (entry.name.startswith(".") and entry.name.endswith((".tmp", ".old")) and entry.is_dir()):
            continue
        owner = re.search(r"\.pid(\d+)\.", entry.name)
        try:
            stale = (not _process_alive(int(owner.group(1))) if owner
                     else time.time() - entry.stat().st_mtime > LEGACY_TEMPORARY_AGE)
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike, what: str) -> Iterator[Path]:
    """Holds an exclusive lock on the file ``path`` while the block runs, or raises at once, naming
    the process that holds it, when another one does (``what``: who holds such a lock, for the message).

    ``flock``: the kernel drops the lock when its process ends, however it ends, so a lock file that
    a killed run left behind holds nothing and is taken over. The file holds its owner's pid (for the
    message) and is removed on release; a run that locked a file another run was just removing
    tries again on the new one, so two runs never both hold the lock."""
    import fcntl

    path = Path(path).expanduser()
    make_folder(path.parent, "folder of the lock file")
    while True:
        try:
            handle = open(path, "a+", encoding="utf-8")
        except OSError as err:
            raise ViasdError(f"cannot create the lock file {path}: {err.strerror or err}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip()
            handle.close()
            raise ViasdError(f"{what} is running already (process {owner or 'unknown'}, lock {path}); "
                             "wait for it to end") from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # locked a file its owner was removing: lock the new one
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    try:
        yield path
    finally:
        try:
            path.unlink()
        except OSError:
            pass
        handle.close()


def file_digest(path: str | os.PathLike) -> str:
    """The sha256 of a file's content, read in 1 MiB chunks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_text(path: str | os.PathLike, text: str, what: str = "file") -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), what)


def write_json(path: str | os.PathLike, data: Any, what: str = "JSON file") -> Path:
    return write_text(path, json_text(data), what)


def json_text(data: Any, indent: int | None = 2) -> str:
    """The JSON text of ``data``, as the project writes it (a file's content, a command's output)."""
    return json.dumps(data, indent=indent) + "\n"


def key_text(data: Any, sort_keys: bool = False, compact: bool = False) -> str:
    """The JSON text a cache key digests (not a file): the same bytes for the same data, so a cache
    keyed on it is found again; ``sort_keys`` and ``compact`` as the key was first written."""
    return json.dumps(data, sort_keys=sort_keys, separators=(",", ":") if compact else None)


def save_figure(figure, path: str | os.PathLike, dpi: int = 110) -> Path:
    """A matplotlib figure, atomically, in the format its suffix names (``.png`` when it has none).

    The temporary file has another suffix, so the format is passed explicitly."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    return write_atomic(path, lambda tmp: figure.savefig(tmp, dpi=dpi, format=fmt), "plot")


def ensure_writable(path: str | os.PathLike, what: str, force: bool = True) -> Path:
    """Raises :class:`ConfigError` unless ``path`` can be created (or, with ``force``, overwritten)
    as a file. Commands call it for every output before their first forward, so an unwritable
    ``--out`` or ``--json`` fails at once, not after the whole run."""
    from viasd_adapt.errors import ConfigError

    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory; give a file path")
    kind = output_kind(path)
    if kind == THROUGH:  # a FIFO, a device, a descriptor: written through, never replaced (no --force needed)
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what} {path} is not writable (permission denied)")
        return path
    if kind != REGULAR:
        raise ConfigError(f"{what} {path} is {kind}, not a regular file; give a file path")
    path = _followed(path)  # a link: its target is what is written
    if path.exists() and not force:
        raise ConfigError(f"{what} {path} already exists; pass --force to overwrite it, or choose another path")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{what} {path} is not writable: {ancestor} is not a directory")
    if ancestor == path.parent:
        try:
            with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".viasd-write-test-"):
                pass
        except OSError as err:
            raise ConfigError(f"{what} {path} is not writable: {err.strerror or err}") from None
        if path.exists() and not os.access(path, os.W_OK):
            raise ConfigError(f"{what} {path} is not writable (permission denied)")
    elif not os.access(ancestor, os.W_OK):
        raise ConfigError(f"{what} {path} is not writable: cannot create directories under {ancestor}")
    return path


def relative_name(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """How an artifact saved in ``folder`` records ``path`` (a file or directory it refers to):
    relative to ``folder`` when inside it, else only the last component. Artifacts travel (a pair
    folder is copied, a repository is cloned), so they never record the absolute paths of the
    machine that made them; readers resolve the names against their own folder."""
    target = Path(path).expanduser()
    try:
        return target.resolve().relative_to(Path(folder).expanduser().resolve()).as_posix()
    except ValueError:
        return target.name


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


__all__ = ["REGULAR", "THROUGH", "ensure_writable", "file_digest", "follow_umask", "hold_lock", "make_folder", "output_kind", "process_umask", "read_text", "relative_name", "save_figure", "sweep_stale_temporaries",
           "write_atomic", "write_directory", "write_json", "write_text"]
