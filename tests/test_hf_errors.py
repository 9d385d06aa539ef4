"""Bad input to the HF adapter gets a clear viasd error, never a deep stack trace."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from tests.test_hf_pairs import make_pair
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, model_fingerprint
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

PROMPT = torch.tensor([[5, 17, 2, 40]])


@pytest.fixture(scope="module")
def models():
    return make_pair("llama", layers=4)


def word_tokenizer(words):
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=words[0])


def generate_in(target, drafter, mask, mode="lossy", **kwargs):
    with hf.tiered(target, mask=mask, settings=TierSettings(mode=mode)):
        return target.generate(assistant_model=drafter, do_sample=False, **kwargs)


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_vocabulary_size_mismatch(models, mode):
    target, _, mask = models
    other_vocab = tiny_model("llama", 3, num_layers=1, vocab_size=80)
    with pytest.raises(ModelMismatchError, match="vocabulary mismatch"):
        generate_in(target, other_vocab, mask, mode, input_ids=PROMPT, max_new_tokens=4)
    assert not hf.is_patched(target)


def test_tokenizer_vocabulary_mismatch(models):
    target, drafter, mask = models
    a = word_tokenizer(["<unk>", "a", "b", "c"])
    b = word_tokenizer(["<unk>", "a", "c", "b"])
    with pytest.raises(ModelMismatchError, match="vocabularies"):
        hf.patch(target, mask=mask, tokenizer=a, assistant_tokenizer=b)
    with pytest.raises(ModelMismatchError, match="vocabularies"):
        generate_in(target, drafter, mask, input_ids=PROMPT, max_new_tokens=4, tokenizer=a, assistant_tokenizer=b)
    same = generate_in(target, drafter, mask, input_ids=PROMPT, max_new_tokens=4, tokenizer=a, assistant_tokenizer=a)
    assert same.shape[1] == PROMPT.shape[1] + 4


def test_mask_for_another_model(models, tmp_path):
    target, _, _ = models
    with pytest.raises(ModelMismatchError, match="decoder layers"):
        hf.patch(target, mask=RoutingMask.from_skipped(6, [1, 3]))
    other = tiny_model("llama", 9, num_layers=4, vocab_size=96)
    artifact = MaskArtifact(RoutingMask.from_skipped(4, [1, 3]), ratio=0.5, fingerprint=model_fingerprint(other))
    with pytest.raises(ModelMismatchError, match="another model"):
        hf.patch(target, mask=artifact)
    path = artifact.save(tmp_path / "mask.json")
    with pytest.raises(ModelMismatchError, match="another model"):
        hf.patch(target, mask=path)
    with pytest.raises(ViasdError, match="not found"):
        hf.patch(target, mask=tmp_path / "missing.json")
    assert not hf.is_patched(target)
    good = MaskArtifact(RoutingMask.from_skipped(4, [1, 3]), ratio=0.5, fingerprint=model_fingerprint(target))
    hf.unpatch(hf.patch(target, mask=good.save(tmp_path / "good.json")))


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_bad_budgets_prompts_and_batches(models, mode):
    target, drafter, mask = models
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate_in(target, drafter, mask, mode, input_ids=PROMPT, max_new_tokens=0)
    with pytest.raises(ConfigError, match="empty"):
        generate_in(target, drafter, mask, mode, input_ids=torch.zeros((1, 0), dtype=torch.long), max_new_tokens=4)
    if True:  # every tiered mode decodes a batch row by row and takes left padding only
        with pytest.raises(ConfigError, match="left padding"):
            generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1),
                        attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), max_new_tokens=4)
        with pytest.raises(ConfigError, match="all padding"):
            generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1),
                        attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), max_new_tokens=4)
        with pytest.raises(ConfigError, match="streamers"):
            generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1), max_new_tokens=4,
                        streamer=object())
    assert not hf.is_patched(target)


def test_bad_settings(models):
    target, _, mask = models
    with pytest.raises(ConfigError, match="needs a routing mask"):
        hf.patch(target, settings=TierSettings(mode="lossy"))
    with pytest.raises(ConfigError, match="TierSettings"):
        hf.patch(target, mask=mask, settings={"mode": "lossy"})
    with pytest.raises(ConfigError, match="mask must be"):
        hf.patch(target, mask=[1, 0, 1, 1])
    with pytest.raises(ConfigError, match="unknown mode"):
        TierSettings(mode="fast")
    assert not hf.is_patched(target)
