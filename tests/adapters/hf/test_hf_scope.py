"""The patch is scoped per instance and per thread: stopping criteria that raise, explicit
patch/unpatch, nested sessions, a user's own instance attribute, other threads and other instances,
and the fallback to the stock path.

Restoration after every mode and after an exception (inside a generation and in the user's block)
is tested on the HF adapter in tests/conformance/test_scope.py.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

import viasd_adapt
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.core.settings import TierSettings


PROMPT = torch.tensor([[5, 17, 2, 40, 9]])


@pytest.fixture()
def models():
    target, drafter, mask = truncated_pair("llama", layers=6, sharpness=3.0)
    drafter.generation_config.num_assistant_tokens = 4
    return target, drafter, mask


def assert_pristine(target):
    assert "generate" not in target.__dict__ and "_get_candidate_generator" not in target.__dict__
    assert target.generate.__func__ is type(target).generate
    assert target._get_candidate_generator.__func__ is type(target)._get_candidate_generator
    assert not hf.is_patched(target)
    assert not target._forward_hooks and not target._forward_pre_hooks


@torch.no_grad()
def cached_forward(target):
    """Logits of a prefill then one cached step: exercises the target's own KV-cache path."""
    first = target(PROMPT, use_cache=True)
    from viasd_adapt.routing.runner import cache_kwarg_name

    cache = {cache_kwarg_name(target): first.past_key_values}  # 5.24 renamed past_key_values to cache
    step = target(torch.tensor([[7]]), use_cache=True, **cache)
    return torch.cat([first.logits[0, -1:], step.logits[0, -1:]])


def reference(target, drafter):
    return (target.generate(PROMPT, max_new_tokens=12, do_sample=False).tolist(),
            target.generate(PROMPT, assistant_model=drafter, max_new_tokens=12, do_sample=False).tolist(),
            cached_forward(target).tolist())


class Boom(RuntimeError):
    pass


class ExplodingCriteria(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        raise Boom("stopping criteria failed")


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_restored_after_stopping_criteria_raise_inside_generation(models, mode):
    target, drafter, mask = models
    before = reference(target, drafter)
    with pytest.raises(Boom):
        with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode=mode))):
            target.generate(PROMPT, assistant_model=drafter, max_new_tokens=12, do_sample=False,
                            stopping_criteria=StoppingCriteriaList([ExplodingCriteria()]))
    assert_pristine(target)
    assert reference(target, drafter) == before


def test_explicit_patch_and_idempotent_unpatch(models):
    target, drafter, mask = models
    handle = hf.patch(target,
                      context=viasd_adapt.context(target,
                                                  mask=mask, settings=TierSettings(mode="lossy", adaptive=False)))
    out = target.generate(PROMPT, assistant_model=drafter, max_new_tokens=8, do_sample=False)
    assert handle.metrics.committed == out.shape[1] - PROMPT.shape[1]
    hf.unpatch(handle)
    hf.unpatch(handle)  # idempotent
    assert_pristine(target)


def test_nested_sessions_and_a_users_own_instance_attribute(models):
    target, drafter, mask = models
    own = lambda *a, **k: "user's own generate"  # noqa: E731
    target.generate = own
    with hf.tiered(target, context=viasd_adapt.context(target, settings=TierSettings(mode="none"))) as outer:
        with hf.tiered(target,
                       context=viasd_adapt.context(target,
                                                   mask=mask,
                                                   settings=TierSettings(mode="lossy", adaptive=False))) as inner:
            with pytest.warns(hf.ViasdFallbackWarning, match="replaced"):
                assert target.generate(PROMPT, assistant_model=drafter, max_new_tokens=4) == "user's own generate"
        assert hf.is_patched(target)
    assert target.__dict__["generate"] is own
    del target.generate
    assert_pristine(target)
    assert inner.closed and outer.closed


def test_other_threads_and_other_instances_are_untouched(models):
    target, drafter, mask = models
    other, _, _ = truncated_pair("llama", layers=6, sharpness=3.0)
    stock = reference(target, drafter)[1]
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other_thread():
        inside.wait(30)
        seen["out"] = target.generate(PROMPT, assistant_model=drafter, max_new_tokens=12, do_sample=False).tolist()
        done.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask,
                                               settings=TierSettings(mode="lossy", adaptive=False))) as session:
        assert "generate" not in other.__dict__
        inside.set()
        assert done.wait(60)
        assert session.history == []  # the other thread's call was not tiered
        mine = target.generate(PROMPT, assistant_model=drafter, max_new_tokens=12, do_sample=False).tolist()
    worker.join()
    assert seen["out"] == stock
    assert len(session.history) == 1 and session.metrics.slim_passes > 0
    assert mine[0][:PROMPT.shape[1]] == PROMPT[0].tolist()


def test_fallback_warns_and_runs_the_stock_path(models):
    target, drafter, mask = models
    both = dict(prompt_lookup_num_tokens=3, assistant_model=drafter, max_new_tokens=10, do_sample=False)
    stock_both = target.generate(PROMPT, **both).tolist()
    plain = target.generate(PROMPT, max_new_tokens=10, do_sample=False).tolist()
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask,
                                               settings=TierSettings(mode="lossy", adaptive=False))) as session:
        with pytest.warns(hf.ViasdFallbackWarning, match="both prompt_lookup_num_tokens and assistant_model"):
            assert target.generate(PROMPT, **both).tolist() == stock_both
        with pytest.warns(hf.ViasdFallbackWarning, match="no assistant_model"):
            assert target.generate(PROMPT, max_new_tokens=10, do_sample=False).tolist() == plain
        with pytest.warns(hf.ViasdFallbackWarning, match="early-exit"):
            target.generate(PROMPT, assistant_early_exit=2, max_new_tokens=6, do_sample=False)
    assert len(session.fallbacks) == 3 and session.history == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", hf.ViasdFallbackWarning)
        with hf.tiered(target,
                       context=viasd_adapt.context(target,
                                                   mask=mask, settings=TierSettings(mode="lossy", adaptive=False))):
            target.generate(PROMPT, assistant_model=drafter, max_new_tokens=4, do_sample=False)
