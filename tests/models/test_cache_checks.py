"""The caches under ``$VIASD_CACHE`` check what they read back (the GGUF cache has its own tests):
the distillation answers' shards and the completed EAGLE heads. A damaged or edited entry is said
to be unusable (:class:`CacheEntryWarning`) and made again; it is never used."""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.pairs import char_tokenizer
from viasd_adapt.cache_check import CacheEntryWarning
from viasd_adapt.training.distill_data import cached_target_answers, shard_digest
from viasd_adapt.models.tiny import tiny_model


PROMPTS = ["def f(x):", "class A:", "import os"]


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama", seed=0, num_layers=2, vocab_size=char_tokenizer().vocab_size)


def _answers(target, root):
    return cached_target_answers(target, char_tokenizer(), PROMPTS, 4, batch_size=2, top_k=3, cache_root=root)


def _same(a, b):
    return all(torch.equal(x.ids, y.ids) and torch.equal(x.topk_ids, y.topk_ids) and torch.equal(x.topk_logits, y.topk_logits)
               for x, y in zip(a, b)) and len(a) == len(b)


def _shard(root):
    (path,) = list(root.glob("*.pt"))
    return path


def test_a_distillation_shard_with_an_edited_answer_is_regenerated(target, tmp_path):
    first = _answers(target, tmp_path)
    path = _shard(tmp_path)
    data = torch.load(path, weights_only=True)
    assert data["digest"] == shard_digest(data["items"])
    data["items"][0]["ids"][-1] = (int(data["items"][0]["ids"][-1]) + 1) % 90  # one answer token edited
    torch.save(data, path)
    with pytest.warns(CacheEntryWarning, match=r"distillation data shard .* is unusable \(its content does not match "
                                               r"the digest .*\); regenerating it"):
        again = _answers(target, tmp_path)
    assert _same(again, first)
    assert torch.load(path, weights_only=True)["digest"] == shard_digest(torch.load(path, weights_only=True)["items"])


@pytest.mark.parametrize("edit, needle", [
    (lambda item: item.update(topk_ids=item["topk_ids"].fill_(10_000)), "outside the vocabulary"),
    (lambda item: item.update(ids=item["ids"].float()), "other dtypes"),
    (lambda item: item.update(answer_start=10_000), "no answer inside"),
    (lambda item: item.update(topk_logits=item["topk_logits"].fill_(float("nan"))), "non-finite"),
])
def test_a_shard_that_cannot_be_the_answers_is_regenerated_even_with_a_new_digest(target, tmp_path, edit, needle):
    first = _answers(target, tmp_path)
    path = _shard(tmp_path)
    data = torch.load(path, weights_only=True)
    edit(data["items"][1])
    torch.save(data, path)
    with pytest.warns(CacheEntryWarning, match=needle):
        assert _same(_answers(target, tmp_path), first)


def test_a_shard_of_the_first_layout_is_checked_used_and_given_its_digest(target, tmp_path):
    first = _answers(target, tmp_path)
    path = _shard(tmp_path)
    items = torch.load(path, weights_only=True)["items"]
    torch.save(items, path)  # how shards were written before they carried a digest
    assert _same(_answers(target, tmp_path), first)
    assert torch.load(path, weights_only=True)["digest"] == shard_digest(items)
    items[0]["topk_ids"][0, 0] = -1
    torch.save(items, path)
    with pytest.warns(CacheEntryWarning, match="outside the vocabulary"):
        assert _same(_answers(target, tmp_path), first)


def test_a_damaged_completed_eagle_head_is_made_again(tmp_path, monkeypatch):
    from viasd_adapt.models.eagle_head_files import DIGESTS_FILE, SHARED_EMBEDDING, complete_head

    base = tmp_path / "base"
    tiny_model("llama", seed=0, num_layers=2).save_pretrained(base)
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"viasd_embedding": SHARED_EMBEDDING, "hidden_size": 8}))
    torch.save({"fc.weight": torch.ones(2, 2)}, head / "pytorch_model.bin")
    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "cache"))
    folder = complete_head(head, base)
    assert (folder / DIGESTS_FILE).is_file()
    good = torch.load(folder / "pytorch_model.bin", weights_only=True)
    assert "embed_tokens.weight" in good
    weights = folder / "pytorch_model.bin"
    raw = bytearray(weights.read_bytes())
    at = bytes(raw).index(torch.ones(2, 2).numpy().tobytes())
    raw[at + 2] ^= 0x40  # a flipped bit inside the head's matrix: still a readable file
    weights.write_bytes(bytes(raw))
    from viasd_adapt.models import eagle_head_files

    eagle_head_files._CHECKED.discard(folder)  # a new process: nothing checked yet
    with pytest.warns(CacheEntryWarning, match=r"completed EAGLE head .* is unusable \(pytorch_model.bin does not match"):
        assert complete_head(head, base) == folder
    again = torch.load(folder / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(again[k], good[k]) for k in good)
