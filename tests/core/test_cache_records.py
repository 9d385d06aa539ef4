"""The records the model caches write beside what they hold are typed artifacts, and the records
written before they were (by earlier versions) are still read as they were meant."""

from __future__ import annotations

import json

import pytest

from viasd_adapt.config.cache_records import CompletedHeadDigests, GGUFCacheRecord, SharedDrafterMarker
from viasd_adapt.errors import ConfigError


def test_an_earlier_gguf_record_is_read_with_its_cache_layout():
    earlier = {"format": 2, "file": "m.gguf", "sha256": "ab", "transformers": "5.0.0", "files": {"config.json": "cd"}}
    record = GGUFCacheRecord.from_json(earlier, "gguf_source.json")
    assert record.cache == 2 and record.files == {"config.json": "cd"}
    assert GGUFCacheRecord.from_json(record.to_json()) == record  # and the typed record round-trips


def test_a_marker_without_its_target_is_refused_by_file_and_field(tmp_path):
    path = tmp_path / "viasd_drafter.json"
    path.write_text(json.dumps({"format": SharedDrafterMarker.FORMAT, "vocab_size": 10, "draft_vocab": [1, 2]}))
    with pytest.raises(ConfigError, match=r"viasd_drafter.json: field 'target_fingerprint': Field required"):
        SharedDrafterMarker.load(path)


def test_an_untyped_digest_record_is_not_taken_for_one(tmp_path):
    """Written before the record was typed: the completed head is made again (cheap), not trusted."""
    path = tmp_path / "viasd_digests.json"
    path.write_text(json.dumps({"config.json": "ab", "pytorch_model.bin": "cd"}))
    with pytest.raises(ConfigError, match="not a viasd-adapt completed EAGLE head digests"):
        CompletedHeadDigests.load(path)
    CompletedHeadDigests(files={"config.json": "ab"}).save(path)
    assert CompletedHeadDigests.load(path).files == {"config.json": "ab"}
