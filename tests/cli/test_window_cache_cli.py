"""``viasd search --window-cache``: what is read back is checked before it is scored on.

A cache entry whose content no longer matches its digest (one flipped bit, an edited id), whose
ids leave the vocabulary, or whose tensors have another shape or dtype is unusable: the search
says so in one line and regenerates it, and finds the mask it finds without a cache. A cache path
that cannot be written fails before any model loads, like ``--out``."""

from __future__ import annotations

import os

import pytest
import torch

from tests.cli.test_search_cli import run, save_model
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.search.decoder_windows import windows_digest


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("window-cache")
    return save_model(root / "target", "qwen2", 0, 4), save_model(root / "draft", "qwen2", 1, 1)


@pytest.fixture()
def calib(tmp_path):
    path = tmp_path / "calib.txt"
    path.write_text("def add(a, b):\nclass Point:\nfor i in range(10):\n")
    return path


def search(models, calib, out, *extra):
    target, draft = models
    return run(["--target", target, "--draft", draft, "--calib", calib, "--steps", 6, "--ratio", 0.5, "--new-tokens", 3,
                "--heldout-prompts", 1, "--out", out, "--force", "--no-progress", "--threads", 1, *extra])


@pytest.fixture()
def first(models, calib, tmp_path):
    """A search that wrote its mask and its window cache (two entries: calibration and held-out)."""
    out = tmp_path / "mask.json"
    result = search(models, calib, out)
    assert result.exit_code == 0, result.output
    cache = tmp_path / "mask.windows.pt"
    assert cache.is_file() and MaskArtifact.load(out).report.time.window_cache.misses == 2
    return out, cache, MaskArtifact.load(out).mask.bits()


def _again(models, calib, out, *needles, misses=1):
    result = search(models, calib, out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    window_cache = MaskArtifact.load(out).report.time.window_cache
    assert (window_cache.hits, window_cache.misses) == (2 - misses, misses)
    return MaskArtifact.load(out).mask.bits()


def test_one_flipped_bit_inside_a_stored_tensor_is_caught_and_regenerated(models, calib, first):
    out, cache, bits = first
    entries = torch.load(cache, weights_only=True)["entries"]
    stored = next(iter(entries.values()))["input_ids"]
    raw = cache.read_bytes()
    at = raw.index(stored.numpy().tobytes())  # the tensor's bytes, stored uncompressed in the archive
    flipped = bytearray(raw)
    flipped[at + 8 * (stored.shape[1] - 1)] ^= 0x01  # the last id of the first window, off by one
    cache.write_bytes(bytes(flipped))
    damaged = torch.load(cache, weights_only=True)["entries"]  # the archive still reads
    assert any(not torch.equal(e["input_ids"], entries[k]["input_ids"]) for k, e in damaged.items())
    assert _again(models, calib, out, "unusable", "does not match the digest", "regenerating") == bits
    # what was regenerated was saved: the next run hits both entries
    assert _again(models, calib, out, misses=0) == bits


def _rewrite(cache, change, redigest=True):
    data = torch.load(cache, weights_only=True)
    key = next(iter(data["entries"]))
    entry = data["entries"][key]
    entry["input_ids"], entry["scored"] = change(entry["input_ids"], entry["scored"])
    if redigest:  # as a hand edit that also recomputed the digest would
        entry["digest"] = windows_digest(entry["input_ids"], entry["scored"])
    torch.save(data, cache)


@pytest.mark.parametrize("change, needle", [
    (lambda ids, scored: (ids.clone().fill_(10_000), scored), "outside the target's vocabulary"),
    (lambda ids, scored: (ids.float(), scored), "not int64"),
    (lambda ids, scored: (ids[:, :-1], scored[:, :-1]), "positions wide"),
    (lambda ids, scored: (ids[:1], scored[:1]), "not one row per prompt"),
    (lambda ids, scored: (torch.where(scored, (ids + 1) % 96, ids), scored), None),  # an edited continuation
])
def test_an_entry_that_cannot_be_the_windows_is_regenerated_not_a_traceback(models, calib, first, change, needle):
    out, cache, bits = first
    redigest = needle is not None
    _rewrite(cache, change, redigest)
    expected = [needle] if redigest else ["does not match the digest"]
    assert _again(models, calib, out, "unusable", *expected) == bits


def test_an_edited_prompt_part_with_a_new_digest_is_caught(models, calib, first):
    out, cache, bits = first
    _rewrite(cache, lambda ids, scored: (torch.where(scored.cumsum(1) == 0, (ids + 1) % 96, ids), scored))
    assert _again(models, calib, out, "does not start with its prompt") == bits


def test_an_older_or_unreadable_cache_file_is_said_and_regenerated(models, calib, first):
    out, cache, bits = first
    data = torch.load(cache, weights_only=True)
    data["format"] = 1
    torch.save(data, cache)
    assert _again(models, calib, out, "unusable", "format 1", misses=2) == bits
    cache.write_bytes(b"not a torch file")
    assert _again(models, calib, out, "unusable", "cannot be read as a torch file", misses=2) == bits


def test_a_window_cache_that_cannot_be_written_fails_before_anything_loads(tmp_path, calib):
    missing = tmp_path / "no-such-model"  # the models do not exist: the error must come first
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = run(["--target", missing, "--draft", missing, "--calib", calib, "--out", tmp_path / "m.json",
                  "--window-cache", folder])
    assert result.exit_code == 2 and "--window-cache" in result.output and "is a directory" in result.output
    assert not (tmp_path / "m.json").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = run(["--target", missing, "--draft", missing, "--calib", calib, "--out", tmp_path / "m.json",
                  "--window-cache", blocker / "w.pt"])
    assert result.exit_code == 2 and "--window-cache" in result.output and "not writable" in result.output
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere
            pytest.skip("a read-only folder is writable for this user")
        result = run(["--target", missing, "--draft", missing, "--calib", calib, "--out", tmp_path / "m.json",
                      "--window-cache", locked / "w.pt"])
        assert result.exit_code == 2 and "--window-cache" in result.output and "not writable" in result.output
    finally:
        os.chmod(locked, 0o755)
