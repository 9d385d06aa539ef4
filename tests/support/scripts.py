"""The benchmark scripts as modules, for the tests that check what they render or measure."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from types import ModuleType
from typing import Iterator

from tests.support import REPO_ROOT


@contextlib.contextmanager
def benchmark_module(name: str) -> Iterator[ModuleType]:
    """``benchmarks/NAME.py`` loaded as the module ``NAME``: registered in ``sys.modules`` while in
    use, since dataclasses look their module up by name, and removed afterwards."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
