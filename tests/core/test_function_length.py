"""Every function of the package, its adapters and its benchmarks is at most 80 lines long.

A function's length runs from its ``def`` line to its last line (docstring and comments
included, decorators not), read with ``ast``; a nested function counts inside its parent too.
``viasd_adapt/adapters`` is a link to the top-level ``adapters/`` folder: each file is read once,
under its real path. The few functions allowed to be longer are named in :data:`EXCEPTIONS`
with the reason; an exception whose function is gone or has become short enough is reported,
so that the list cannot outlive its reasons. Controls feed the checks synthetic sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO_ROOT

LIMIT = 80
SCANNED = ("viasd_adapt", "adapters", "benchmarks")

#: ``path::qualified name`` -> why it may be longer than :data:`LIMIT`
EXCEPTIONS: dict[str, str] = {}


def function_lengths(source: str, path: str) -> dict[str, int]:
    """``path::qualified name`` -> length in lines, for every function and method in ``source``."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                lengths[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def scanned_files(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Repository-relative real path -> file, for every ``.py`` file under :data:`SCANNED`, each once
    (a file reached through a link is named by where it really lies)."""
    real_root = root.resolve()
    found: dict[str, Path] = {}
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            real = path.resolve()
            found.setdefault(real.relative_to(real_root).as_posix(), real)
    return found


def long_functions(files: dict[str, Path], limit: int = LIMIT) -> dict[str, int]:
    """The functions of ``files`` longer than ``limit`` lines, with their lengths."""
    long: dict[str, int] = {}
    for name, path in files.items():
        long.update({key: n for key, n in function_lengths(path.read_text(encoding="utf-8"), name).items() if n > limit})
    return long


def stale_exceptions(long: dict[str, int], exceptions: dict[str, str]) -> list[str]:
    """The exceptions that no longer name a function longer than the limit (gone, or short now)."""
    return sorted(key for key in exceptions if key not in long)


def test_every_function_is_at_most_80_lines():
    long = long_functions(scanned_files())
    over = {key: n for key, n in sorted(long.items()) if key not in EXCEPTIONS}
    assert not over, (f"functions longer than {LIMIT} lines (split them into helpers, or name one in EXCEPTIONS "
                      "with its reason):\n  " + "\n  ".join(f"{key}: {n} lines" for key, n in over.items()))


def test_every_exception_still_names_a_long_function():
    stale = stale_exceptions(long_functions(scanned_files()), EXCEPTIONS)
    assert not stale, f"EXCEPTIONS names functions that are gone or at most {LIMIT} lines now; remove them: {stale}"


def test_each_file_is_read_once_under_its_real_path():
    files = scanned_files()
    assert "adapters/hf/patch.py" in files and "viasd_adapt/core/cycle.py" in files and "benchmarks/mask_frontier.py" in files
    assert not any(name.startswith("viasd_adapt/adapters/") for name in files)  # the link is not read twice
    assert len({path for path in files.values()}) == len(files)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return None\n"


def test_the_control_an_81_line_function_is_flagged(tmp_path):
    source = (_function("short", 80) + "\n\n" + _function("long", 81) + "\n\nclass Host:\n" + _function("method", 81, "    ")
              + "\n\ndef outer():\n" + _function("inner", 81, "    ") + "    return inner\n")
    assert function_lengths(source, "m.py")["m.py::short"] == 80
    (tmp_path / "m.py").write_text(source)
    long = long_functions({"m.py": tmp_path / "m.py"})
    assert long == {"m.py::long": 81, "m.py::Host.method": 81, "m.py::outer": 83, "m.py::outer.inner": 81}


def test_the_control_a_stale_exception_is_reported():
    long = {"a.py::kept": 95}
    exceptions = {"a.py::kept": "still long", "a.py::gone": "renamed away", "a.py::short_now": "was split"}
    assert stale_exceptions(long, exceptions) == ["a.py::gone", "a.py::short_now"]


def test_the_control_a_link_is_read_once(tmp_path):
    (tmp_path / "adapters").mkdir()
    (tmp_path / "adapters" / "seam.py").write_text(_function("f", 3))
    (tmp_path / "viasd_adapt").mkdir()
    (tmp_path / "viasd_adapt" / "adapters").symlink_to(tmp_path / "adapters", target_is_directory=True)
    (tmp_path / "benchmarks").mkdir()
    assert list(scanned_files(tmp_path)) == ["adapters/seam.py"]
