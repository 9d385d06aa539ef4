"""Counting how often a run reads an artifact: every read goes through a class's ``load``."""

from __future__ import annotations

import pytest


def count_loads(monkeypatch: pytest.MonkeyPatch, artifact_class: type) -> list[str]:
    """The paths ``artifact_class.load(path)`` is called with, in order, from now on."""
    reads: list[str] = []
    original = artifact_class.load.__func__

    def counting(cls, path, *args, **kwargs):
        reads.append(str(path))
        return original(cls, path, *args, **kwargs)

    monkeypatch.setattr(artifact_class, "load", classmethod(counting))
    return reads
