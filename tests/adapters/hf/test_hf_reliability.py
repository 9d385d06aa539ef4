"""Reliability through the HF adapter and the framework registry:

* a prompt ending in EOS (and BART's decoder start id, which is its EOS) still generates;
* output-capturing hooks are never installed twice, nor left behind by a tiered scope;
* model inputs the tier's loop would drop (``token_type_ids``) send the call to the stock path;
* the context check reserves only the positions a block can use (a huge gamma, a prompt near the limit);
* an over-long encoder source, and a T5 transformers' generate() cannot decode, are refused by name;
* EAGLE on an encoder-decoder target says it cannot run those, not that a head is missing.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import viasd_adapt
from tests.support.pairs import greedy_reference, truncated_pair
from tests.support.seq2seq import seq2seq_pair, source_for
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair, MaskInfo
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.core.settings import TierSettings


EOS = 3
PROMPT = torch.tensor([[5, 17, 2, EOS]])  # ends in the EOS id


@pytest.fixture(scope="module")
def models():
    target, drafter, mask = truncated_pair("llama", layers=4)
    target.generation_config.eos_token_id = EOS
    return target, drafter, mask


def _tiered(target, drafter, mask, mode, **kwargs):
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask,
                                               settings=TierSettings(mode=mode, **kwargs.pop("settings", {})))) as session:
        out = target.generate(assistant_model=drafter, do_sample=False, **kwargs)
    return out, session


@pytest.mark.parametrize("mode", ["lenient", "lossless", "lossy", "audit"])
def test_a_prompt_ending_in_eos_generates_like_stock(models, mode):
    target, drafter, mask = models
    stock = target.generate(PROMPT, assistant_model=drafter, do_sample=False, max_new_tokens=8)
    out, _ = _tiered(target, drafter, mask, mode, inputs=PROMPT, max_new_tokens=8)
    assert out.shape[1] > PROMPT.shape[1]  # before the fix: no token at all
    if mode == "lossless":
        assert torch.equal(out, stock)


def test_bart_whose_decoder_start_is_eos_generates_every_row():
    target, drafter, mask = seq2seq_pair("bart")
    eos = target.generation_config.eos_token_id
    for model in (target, drafter):  # as in every real BART checkpoint: decoding starts at the EOS id
        model.config.decoder_start_token_id = model.generation_config.decoder_start_token_id = eos
    source = source_for("bart")
    stock = target.generate(**source, assistant_model=drafter, do_sample=False, max_new_tokens=6)
    for batch in (1, 2):
        batched = {k: v.repeat(batch, 1) for k, v in source.items()}
        out, _ = _tiered(target, drafter, mask, "lossless", **batched, max_new_tokens=6)
        assert out.shape == (batch, stock.shape[1])  # before the fix: (batch, 1)
        assert torch.equal(out[0], stock[0])


def _hidden_count(model) -> tuple[int, int]:
    with torch.no_grad():
        out = model(PROMPT, output_hidden_states=True, output_attentions=True)
    return len(out.hidden_states), len(out.attentions)


def test_output_capturing_hooks_are_not_doubled_nor_left_behind():
    target, drafter, _ = truncated_pair("llama", layers=2)
    from viasd_adapt.config.mask import RoutingMask

    mask = RoutingMask.from_skipped(2, [1])
    before = _hidden_count(target)  # transformers hooks the inner model only
    assert before == (3, 2)
    _tiered(target, drafter, mask, "lossless", inputs=PROMPT, max_new_tokens=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # per-step outputs: the stock path runs (with a fallback warning)
        stock_like, _ = _tiered(target, drafter, mask, "lossless", inputs=PROMPT, max_new_tokens=4,
                                output_hidden_states=True, return_dict_in_generate=True)
    assert all(len(step) == 3 for step in stock_like.hidden_states)  # 2 layers + embeddings, not 5
    assert _hidden_count(target) == before  # after the scope: plain forwards unchanged


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_token_type_ids_send_the_call_to_the_stock_path(mode):
    target, drafter, mask = truncated_pair("gpt2", layers=4)
    types = torch.ones_like(PROMPT)
    stock = target.generate(PROMPT, token_type_ids=types, assistant_model=drafter, do_sample=False, max_new_tokens=6)
    with pytest.warns(hf.ViasdFallbackWarning, match="token_type_ids"):
        out, session = _tiered(target, drafter, mask, mode, inputs=PROMPT, token_type_ids=types, max_new_tokens=6)
    assert torch.equal(out, stock)
    assert "token_type_ids" in session.fallbacks[-1]


def test_a_huge_gamma_and_a_prompt_near_the_limit_run(models):
    """Blocks are shortened to the budget, so no speculative margin is reserved."""
    target, drafter, mask = models
    limit = target.config.max_position_embeddings
    prompt = [(7 * i) % 90 + 4 for i in range(limit - 12)]
    expected = greedy_reference(target, prompt, 12)
    ids = torch.tensor([prompt])
    out, _ = _tiered(target, drafter, mask, "lossless", inputs=ids, max_new_tokens=12, eos_token_id=[], pad_token_id=0,
                     settings=dict(gamma=1000))
    assert out[0, len(prompt):].tolist() == expected
    pair = LoadedPair(target, drafter, None, MaskInfo(mask, "test", False), torch.device("cpu"))
    for framework in ("engine", "pearl"):
        request = RunRequest("lossless", prompt, 12, TierSettings(mode="lossless", gamma=1000))
        assert frameworks.run(framework, pair, request).tokens == expected


def test_an_over_long_bart_source_is_refused_by_name():
    target, drafter, mask = seq2seq_pair("bart")
    limit = target.config.max_position_embeddings
    source = torch.full((1, limit + 4), 5)
    with pytest.raises(ConfigError, match=f"exceeds the encoder's {limit} positions"):
        _tiered(target, drafter, mask, "lossless", input_ids=source, max_new_tokens=3)
    pair = LoadedPair(target, drafter, None, MaskInfo(mask, "test", False), torch.device("cpu"))
    for framework, mode in (("ar", "none"), ("engine", "lossless"), ("hf", "lossless")):
        with pytest.raises(ConfigError, match="exceeds the encoder's"):
            frameworks.run(framework, pair, RunRequest(mode, [5] * (limit + 4), 3, TierSettings(mode=mode)))


def test_a_t5_with_more_decoder_than_encoder_layers_is_explained():
    from viasd_adapt.models.tiny_seq2seq import tiny_seq2seq_model

    target = tiny_seq2seq_model("t5", 0, decoder_layers=3, encoder_layers=1)  # generate() sizes its cache by the 1
    pair = LoadedPair(target, target, None, None, torch.device("cpu"))
    for framework, mode in (("ar", "none"), ("hf", "none")):
        with pytest.raises(ConfigError, match="3 decoder layers.*transformers limitation"):
            frameworks.run(framework, pair, RunRequest(mode, [5, 6, 7], 3, TierSettings(mode="none")))


def test_eagle_on_an_encoder_decoder_target_names_that_not_a_head():
    target, drafter, mask = seq2seq_pair("t5")
    pair = LoadedPair(target, drafter, None, MaskInfo(mask, "test", False), torch.device("cpu"))
    reason = frameworks.get("eagle").unavailable(pair)
    assert "decoder-only" in reason and "EAGLE head" not in reason
    with pytest.raises(ConfigError, match="does not support encoder-decoder") as caught:
        frameworks.run("eagle", pair, RunRequest("lossless", [5, 6], 3, TierSettings(mode="lossless")))
    assert "head" not in str(caught.value)
