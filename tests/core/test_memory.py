"""Freed memory goes back to the system between long stages (viasd_adapt.memory)."""

from __future__ import annotations

import os
import sys

import pytest

from viasd_adapt.memory import release_free_memory


def resident_bytes() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm; malloc_trim is glibc's")
def test_memory_the_allocator_kept_after_a_free_is_handed_back():
    """64 KiB blocks interleaved with small live ones: freed, glibc keeps them (the live blocks pin
    the heap); released, the pages go back. Without the release the first assertion's memory stays."""
    keep, drop = [], []
    for _ in range(3000):  # about 200 MB
        block = bytearray(65536)
        block[::4096] = b"x" * 16  # touch every page
        drop.append(block)
        keep.append(bytearray(300))
    del drop
    held = resident_bytes()
    if not release_free_memory():
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert held - resident_bytes() > 100e6
    assert len(keep) == 3000


def test_the_first_load_of_a_gguf_file_hands_its_float32_copy_back(monkeypatch, tmp_path):
    """The dequantized copy of every weight is freed once the cache is written: the first load
    releases it (2.5 GB stayed resident at 0.5B parameters)."""
    import viasd_adapt.models.gguf as gguf

    calls = []
    monkeypatch.setattr(gguf, "release_free_memory", lambda: calls.append("released") or True)
    monkeypatch.setattr(gguf, "_entry_problem", lambda folder, version: "missing")
    monkeypatch.setattr(gguf, "check_gguf_file", lambda path: path)
    monkeypatch.setattr(gguf, "check_cache_space", lambda *a, **k: 0)
    monkeypatch.setattr(gguf, "write_directory", lambda folder, fill, what: calls.append("written"))
    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    gguf.gguf_model_folder(model)
    assert calls == ["written", "released"]
