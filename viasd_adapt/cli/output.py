"""What the ``viasd`` command does when its standard output cannot be written.

stdout is where each command's result goes (the answer of ``generate``, the tables of ``bench``,
``tune``, ``search`` and ``demo``, the JSON of ``models list --json``). When it cannot take it
(closed: ``viasd generate ... >&-``; full: ``> /dev/full``; an I/O error), the command ends with one
line on stderr saying that its output could not be written, and exit status
:data:`OUTPUT_FAILED`, never a traceback from inside click or the interpreter's last flush. A
closed stdout is refused before the command starts; any other failure stops the command at the
first line it cannot write (stdout is flushed line by line, as on a terminal, so a long run does
not finish before the failure shows). Files given with ``--json`` are written atomically
(:func:`viasd_adapt.io.write_atomic`): there whole, or not at all.

A broken pipe (``viasd generate ... | head -1``) is no error: the reader took what it wanted. click
ends such a run quietly, and so does this module's last flush.

Installed by :mod:`viasd_adapt.cli.main` around every command, once, at the CLI's edge: the
commands themselves write with ``click.echo`` and know nothing of it. Only the process's own
stdout is guarded (``sys.stdout is sys.__stdout__``); a caller that replaced it (click's
``CliRunner``, pytest's capture) keeps what it put there.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, Callable

#: Exit status of a command whose output could not be written (click's, for a failed command).
OUTPUT_FAILED = 1


class OutputNotWritten(Exception):
    """stdout refused a write: what the command printed is lost (the reason: the OS's words)."""


class _GuardedStdout(io.BufferedIOBase):
    """stdout's binary buffer, with a failed write raised as :class:`OutputNotWritten` (a broken
    pipe stays a ``BrokenPipeError``, for click's quiet ending). Never closes the buffer it wraps."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner
        self.failed = False
        #: set once the command is over: what still cannot be written is dropped (it was said)
        self.done = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._call(self._inner.write, data)

    def flush(self) -> None:
        if not self.closed:
            self._call(self._inner.flush)

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    @property
    def name(self) -> Any:
        return getattr(self._inner, "name", "<stdout>")

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except OSError as err:
            self.failed = True
            if self.done:
                return None
            if isinstance(err, BrokenPipeError):
                raise
            raise OutputNotWritten(err.strerror or str(err)) from None


def _discard_pending(stream: Any) -> None:
    """Points stdout's file descriptor at the null device, so that what could not be written is
    dropped at exit instead of failing the interpreter's last flush ("Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _say(reason: str) -> None:
    try:
        sys.stderr.write(f"error: the output could not be written (stdout: {reason})\n")
        sys.stderr.flush()
    except (OSError, AttributeError, ValueError):  # stderr is gone too: the exit status says it
        pass


class _ForgivingStderr(io.BufferedIOBase):
    """stderr's descriptor, written directly; a write it refuses (full: ``2>/dev/full``, an I/O error)
    is dropped. stderr carries notes and progress, never a result, so losing them must not cost the
    result (a progress bar that fails to draw would otherwise fail a model's load)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            pass
        return len(data)

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False


def _forgiving_stderr() -> Any:
    """What ``sys.stderr`` becomes for the command (:class:`_ForgivingStderr`), or None when the
    caller replaced stderr (click's ``CliRunner``, pytest's capture keep theirs). A stderr closed at
    start-up (``2>&-``) is pointed at the null device first, so that no file the command opens
    later takes descriptor 2 and receives what a library writes to stderr."""
    original = sys.stderr
    if original is not None and original is not sys.__stderr__:
        return None
    try:
        if original is not None:
            original.flush()
        os.fstat(2)
    except OSError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 2:
                os.dup2(devnull, 2)
                os.close(devnull)
        except OSError:
            return None
    except ValueError:  # a stderr object closed by its owner
        return None
    encoding = getattr(original, "encoding", None) or "utf-8"
    return io.TextIOWrapper(_ForgivingStderr(2), encoding=encoding, errors="backslashreplace", line_buffering=True,
                            write_through=True)


def run_guarded(main: Callable[[], Any]) -> Any:
    """``main()`` (a click command's ``main``) with stdout guarded (module docstring) and stderr made
    forgiving (:func:`_forgiving_stderr`). Exits with :data:`OUTPUT_FAILED` and one line on stderr
    when stdout cannot be written."""
    errors, stderr = sys.stderr, _forgiving_stderr()
    if stderr is None:
        return _run_stdout_guarded(main)
    sys.stderr = stderr
    _KEPT.append(stderr)  # never closed: a library's handler may still hold it when the interpreter ends
    try:
        return _run_stdout_guarded(main)
    finally:
        sys.stderr = errors


_KEPT: list[Any] = []


def _run_stdout_guarded(main: Callable[[], Any]) -> Any:
    original = sys.stdout
    if original is None:  # Python found file descriptor 1 closed at start-up
        _say("it is closed")
        sys.exit(OUTPUT_FAILED)
    if original is not sys.__stdout__ or not hasattr(original, "buffer"):
        return main()
    guard = _GuardedStdout(original.buffer)
    wrapper = io.TextIOWrapper(guard, encoding=original.encoding, errors=original.errors, line_buffering=True,
                               write_through=True)
    sys.stdout = wrapper
    try:
        try:
            return main()
        finally:
            try:
                wrapper.flush()
            except BrokenPipeError:
                pass
    except OutputNotWritten as err:
        _say(str(err))
        sys.exit(OUTPUT_FAILED)
    finally:
        if guard.failed:
            _discard_pending(original)
        sys.stdout = original
        guard.done = True
        wrapper.detach()  # the process's stdout outlives this wrapper: nothing to close


__all__ = ["OUTPUT_FAILED", "OutputNotWritten", "run_guarded"]
