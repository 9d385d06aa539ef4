"""Conformance with transformers' own assisted generation, through the patch, in modes none and lossless.

Written by us, after what transformers' assisted-generation tests check (greedy equivalence with a
random and with the same-object assistant, padded batch-1 prompts, sampling, prompt lookup, the
ensemble weight, the heuristic draft-length schedule, dict outputs with scores and logits,
stopping criteria, the model families). transformers' own test files are not in the installed
wheel (it ships ``transformers/testing_utils.py`` but no ``tests/``), so they cannot be run here.

* **none** must be indistinguishable from stock: the same outputs (tensors and dict fields), the
  same exceptions, the same side effects on the assistant's generation config.
* **lossless** must give stock's tokens (greedy); what its loop does not produce (per-step
  scores, logits, attentions, hidden states; the ensemble weight) falls back to the stock path
  with a :class:`~viasd_adapt.adapters.hf.ViasdFallbackWarning` naming the reason. Prompt lookup
  runs through the tier (a point-mass drafter) and gives stock's tokens without falling back.
  Lossless *sampling* is checked statistically in tests/conformance/test_sampling.py (chi-square
  against the target's exact distribution), and greedy identity with stock on every model family
  in tests/conformance/test_greedy_identity.py. Lossless never touches the assistant's generation config:
  stock's heuristic schedule adapts ``num_assistant_tokens`` across calls; a tiered call leaves it
  as it found it, so later calls behave as if it had not happened.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

import viasd_adapt
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.core.settings import TierSettings


NONE = TierSettings(mode="none")
LOSSLESS = TierSettings(mode="lossless")
PROMPT = torch.tensor([[5, 17, 2, 40, 9, 11]])


@pytest.fixture(scope="module")
def pair():
    return truncated_pair("llama", sharpness=3.0)


def _assistant_state(model) -> dict:
    return copy.deepcopy(model.generation_config.to_dict())


def _run(model, mode, mask, assistant=None, seed=None, **kwargs):
    """``model.generate`` stock (mode None) or inside a session; returns (output or exception,
    the assistant's generation config afterwards, the session's fallbacks, warnings raised)."""
    settings = {"none": NONE, "lossless": LOSSLESS}.get(mode)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if seed is not None:
            torch.manual_seed(seed)
        session = None
        try:
            with torch.no_grad():
                if settings is None:
                    out = model.generate(**kwargs)
                else:
                    with hf.tiered(model, context=viasd_adapt.context(model, mask=mask, settings=settings)) as session:
                        out = model.generate(**kwargs)
        except Exception as err:  # noqa: BLE001 - compared with stock's exception
            out = err
    state = _assistant_state(assistant) if assistant is not None else None
    fallbacks = session.fallbacks if session is not None else []
    fallback_warnings = [w for w in caught if issubclass(w.category, hf.ViasdFallbackWarning)]
    return out, state, fallbacks, fallback_warnings


def _same(a, b) -> None:
    """Two generate results are identical: tensors, dict outputs field by field, or exceptions."""
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b), (a, b)
        return
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
        return
    assert type(a) is type(b)
    keys = {k for k in a.keys()} | {k for k in b.keys()}
    for key in keys:
        x, y = a.get(key), b.get(key)
        if isinstance(x, tuple):
            assert isinstance(y, tuple) and len(x) == len(y), key
            for i, j in zip(x, y):
                _same_nested(i, j, key)
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y), key
        else:
            assert (x is None) == (y is None), key


def _same_nested(x, y, key):
    if isinstance(x, tuple):
        for i, j in zip(x, y, strict=True):
            _same_nested(i, j, key)
    else:
        assert torch.equal(x, y), key


def _both(pair, assistant_kind="random", **kwargs):
    """Stock, none and lossless runs of one call, each from the same assistant state."""
    target, drafter, mask = pair
    assistant = target if assistant_kind == "same" else drafter
    start = _assistant_state(assistant)
    results = {}
    for mode in ("stock", "none", "lossless"):
        assistant.generation_config = GenerationConfig.from_dict(copy.deepcopy(start))
        results[mode] = _run(target, mode, mask, assistant, **kwargs)
    assistant.generation_config = GenerationConfig.from_dict(start)
    return results, start


GREEDY = dict(input_ids=PROMPT, max_new_tokens=12, do_sample=False, pad_token_id=0)
DICT_OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)


# ============================================================================== greedy equivalence


@pytest.mark.parametrize("assistant_kind", ["random", "same"])
@pytest.mark.parametrize("dict_out", [False, True], ids=["tensor", "dict-scores-logits"])
def test_greedy_matches_stock(pair, assistant_kind, dict_out):
    kwargs = dict(GREEDY, **(DICT_OUT if dict_out else {}))
    results, _ = _both(pair, assistant_kind, **kwargs)
    stock, none, lossless = results["stock"], results["none"], results["lossless"]
    _same(none[0], stock[0])
    assert none[1] == stock[1]  # the assistant's generation config afterwards
    assert not none[2] and not none[3]
    if dict_out:  # per-step scores and logits: only the stock loop has them -> stock path, said out loud
        _same(lossless[0], stock[0])
        assert lossless[2] and "output_scores" in lossless[2][0] and len(lossless[3]) == 1
    else:
        assert torch.equal(lossless[0], stock[0])
        assert not lossless[2] and not lossless[3]


def test_padded_batch_of_one(pair):
    padded = torch.cat([torch.zeros((1, 3), dtype=torch.long), PROMPT], dim=1)
    mask = torch.cat([torch.zeros((1, 3), dtype=torch.long), torch.ones_like(PROMPT)], dim=1)
    results, _ = _both(pair, input_ids=padded, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    stock = results["stock"][0]
    assert isinstance(stock, torch.Tensor)  # stock accepts it ...
    _same(results["none"][0], stock)  # ... so none must
    assert torch.equal(results["lossless"][0], stock) and not results["lossless"][2]


def test_stopping_criteria_and_eos(pair):
    class StopAfter(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= PROMPT.shape[1] + 5, dtype=torch.bool)

    stock_plain = _run(pair[0], None, pair[2], pair[1], **GREEDY)[0]
    eos = int(stock_plain[0, PROMPT.shape[1] + 3])
    for extra in (dict(stopping_criteria=StoppingCriteriaList([StopAfter()])), dict(eos_token_id=eos)):
        results, _ = _both(pair, **GREEDY, **extra)
        _same(results["none"][0], results["stock"][0])
        # Stock assisted decoding asks stopping criteria once per cycle, so it may keep a few tokens
        # past the stop; lossless asks after every token: exactly one-token-at-a-time greedy's output.
        plain = _run(pair[0], None, pair[2], None, **GREEDY, **extra)[0]
        assert torch.equal(results["lossless"][0], plain), extra
        assert torch.equal(results["stock"][0][:, : plain.shape[1]], plain)


# ============================================================================== sampling


def test_seeded_sampling_none_equals_stock(pair):
    results, _ = _both(pair, **dict(GREEDY, do_sample=True, temperature=0.9, top_k=20), seed=7)
    _same(results["none"][0], results["stock"][0])
    assert results["none"][1] == results["stock"][1]
    # lossless sampling: distribution test in tests/conformance/test_sampling.py; here only that it ran tiered
    assert isinstance(results["lossless"][0], torch.Tensor) and not results["lossless"][2]


# ============================================================================== other candidate generators


def test_prompt_lookup(pair):
    target, _, mask = pair
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])
    out = {mode: _run(target, mode, mask, None, input_ids=ids, max_new_tokens=8, do_sample=False, pad_token_id=0,
                      prompt_lookup_num_tokens=3) for mode in ("stock", "none", "lossless")}
    _same(out["none"][0], out["stock"][0])
    assert not out["none"][3]
    _same(out["lossless"][0], out["stock"][0])
    assert out["lossless"][2] == [] and out["lossless"][3] == []  # the tier ran it: no fallback
    both = _run(target, "lossless", mask, pair[1], input_ids=ids, max_new_tokens=8, do_sample=False, pad_token_id=0,
                prompt_lookup_num_tokens=3)
    assert both[2] == ["both prompt_lookup_num_tokens and assistant_model were passed; stock decides which drafter runs"]


@pytest.mark.parametrize("do_sample", [False, True])
def test_assistant_ensemble_weight(pair, do_sample):
    target, _, _ = pair
    before = copy.deepcopy(target.generation_config)
    target.generation_config.assistant_ensemble_weight = 0.3
    try:
        results, _ = _both(pair, **dict(GREEDY, do_sample=do_sample), seed=3)
    finally:
        target.generation_config = before
    _same(results["none"][0], results["stock"][0])
    _same(results["lossless"][0], results["stock"][0])
    assert "assistant_ensemble_weight" in results["lossless"][2][0]


# ============================================================================== the assistant's state


def test_heuristic_schedule_state_afterwards(pair):
    _, drafter, _ = pair
    drafter.generation_config.num_assistant_tokens_schedule = "heuristic"
    drafter.generation_config.num_assistant_tokens = 5
    results, start = _both(pair, **GREEDY)
    stock_state, none_state, lossless_state = (results[m][1] for m in ("stock", "none", "lossless"))
    assert stock_state["num_assistant_tokens"] != start["num_assistant_tokens"]  # stock adapted it ...
    assert none_state == stock_state  # ... and so does none, exactly
    assert lossless_state == start  # lossless leaves it as it was (module docstring)


# ============================================================================== exceptions


@pytest.mark.parametrize("bad", [
    dict(num_return_sequences=2),
    dict(max_new_tokens=0),
    dict(input_ids=torch.cat([PROMPT, PROMPT])),  # batch of two: stock assisted generation refuses
], ids=["num_return_sequences", "max_new_tokens-0", "batch-of-two"])
def test_none_raises_what_stock_raises(pair, bad):
    results, _ = _both(pair, **dict(GREEDY, **bad))
    _same(results["none"][0], results["stock"][0])


def test_assistant_with_another_vocabulary(pair):
    target, _, mask = pair
    other = tiny_model("llama", 3, num_layers=1, vocab_size=80)
    stock = _run(target, None, mask, other, **GREEDY)[0]
    none = _run(target, "none", mask, other, **GREEDY)[0]
    _same(none, stock)


def test_tiered_calls_leave_the_assistants_draft_schedule_as_stock_would():
    """Mode none is stock: the heuristic draft length evolves and persists exactly as unpatched.
    A tiered call drafts ``gamma`` tokens itself and leaves the assistant's config untouched, so it
    changes nothing that later calls depend on."""
    target, drafter, mask = truncated_pair("llama", sharpness=3.0)
    ids = torch.tensor([[5, 17, 2, 40, 9]])
    config = drafter.generation_config

    def run(n, mode=None):
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = 4, "heuristic"
        if mode is None:
            target.generate(ids, assistant_model=drafter, max_new_tokens=n, do_sample=False)
        else:
            with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode=mode))):
                target.generate(ids, assistant_model=drafter, max_new_tokens=n, do_sample=False)
        return config.num_assistant_tokens

    stock = {n: run(n) for n in (10, 20)}
    assert set(stock.values()) != {4}  # the heuristic moved: the comparisons below can fail
    assert {n: run(n, "none") for n in stock} == stock
    for mode in ("lossless", "lossy", "lenient"):
        assert run(10, mode) == 4
