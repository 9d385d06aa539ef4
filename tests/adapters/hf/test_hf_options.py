"""HF options users turn on for GPU speed, with the tier: SDPA attention, torch.compile, cache
implementations. Each works (same output, routed views still skip their layers) or gets a clear
error; none may silently run the full model as the "slim" verifier."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch

import viasd_adapt
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError, UnsupportedModelError
from viasd_adapt.routing import SlimVerifier, find_decoder_stack
from viasd_adapt.routing.shared import SharedPrefixRunners
from viasd_adapt.routing.runner import CachedRunner
from viasd_adapt.core.settings import TierSettings


PROMPT = torch.tensor([[5, 17, 2, 40, 9]])
LOSSLESS = TierSettings(mode="lossless")


@contextlib.contextmanager
def layer_calls(model):
    calls: list[int] = []
    handles = [layer.register_forward_pre_hook(lambda module, args, i=i: calls.append(i))
               for i, layer in enumerate(find_decoder_stack(model).layers)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def plain_greedy(target, n=12):
    return target.generate(PROMPT, max_new_tokens=n, do_sample=False).tolist()


def tiered_greedy(target, drafter, mask, n=12, **kw):
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=LOSSLESS)):
        return target.generate(PROMPT, assistant_model=drafter, max_new_tokens=n, do_sample=False, **kw).tolist()


def slim_layers_run(target, mask) -> list[int]:
    with layer_calls(target) as calls, torch.no_grad():
        SlimVerifier(target, mask).model(PROMPT)
    return calls


def test_sdpa_attention_lossless_identical_and_resumed_pass_exact():
    target, drafter, mask = truncated_pair("llama", layers=6)
    for model in (target, drafter):
        model.set_attn_implementation("sdpa")
    assert target.config._attn_implementation == "sdpa"
    assert tiered_greedy(target, drafter, mask) == plain_greedy(target)
    sequence = PROMPT[0].tolist() + [3, 8, 1, 7]
    reference = CachedRunner(target).logits_for(sequence, 5)
    runners = SharedPrefixRunners(target, SlimVerifier(target, mask))
    runners.slim_logits(sequence, 5)
    resumed = runners.full_logits(sequence, 5)
    assert runners.resumed_full_passes == 1
    torch.testing.assert_close(resumed, reference, atol=1e-5, rtol=1e-5)


def test_module_compile_keeps_the_views_routed():
    """``model.compile()``: a view's shallow copy does not keep the compiled call, so it runs its
    own layer list (uncompiled). Compiling the layers themselves (``layer.compile()``) is what
    reaches the views too: they share the layer objects (not traced here: dynamo takes seconds)."""
    torch._dynamo.reset()
    target, drafter, mask = truncated_pair("llama")
    expected = plain_greedy(target, 6)
    target.compile(backend="eager")
    assert slim_layers_run(target, mask) == list(mask.retained)
    assert tiered_greedy(target, drafter, mask, 6) == expected


def test_a_compiled_forward_on_the_instance_no_longer_makes_the_view_the_full_model():
    torch._dynamo.reset()
    target, drafter, mask = truncated_pair("llama")
    expected = plain_greedy(target)
    target.forward = torch.compile(target.forward, backend="eager")
    assert slim_layers_run(target, mask) == list(mask.retained)  # was [0, 1, 2, 3]: the full target
    assert tiered_greedy(target, drafter, mask) == expected


def test_a_torch_compile_wrapper_and_foreign_forward_wrappers_get_a_clear_error():
    target, drafter, mask = truncated_pair("llama")
    wrapper = torch.compile(target, backend="eager")
    with pytest.raises(UnsupportedModelError, match=r"torch.compile wrapper \(OptimizedModule\) .* layer.compile"):
        with hf.tiered(wrapper, context=viasd_adapt.context(wrapper, mask=mask, settings=LOSSLESS)):
            pass
    with pytest.raises(UnsupportedModelError, match=r"torch.compile wrapper \(OptimizedModule\) .* layer.compile"):
        hf.tiered(wrapper).__enter__()  # the adapter refuses it too
    original = target.forward

    @functools.wraps(original)
    def logged(*args, **kwargs):
        return original(*args, **kwargs)

    target.forward = logged
    with pytest.raises(UnsupportedModelError, match=r"forward was replaced on the instance by a wrapper"):
        SlimVerifier(target, mask)


@pytest.mark.parametrize("implementation", ["static", "offloaded"])
def test_other_cache_implementations_run_with_the_tiers_caches_and_say_so(implementation):
    target, drafter, mask = truncated_pair("llama")
    expected = plain_greedy(target)
    with pytest.warns(hf.ViasdCacheWarning, match=f"cache_implementation='{implementation}' is not used"):
        assert tiered_greedy(target, drafter, mask, cache_implementation=implementation) == expected
    target.generation_config.cache_implementation = implementation  # as a model's shipped config may say
    with pytest.warns(hf.ViasdCacheWarning):
        assert tiered_greedy(target, drafter, mask) == expected


def test_a_cache_object_passed_to_generate_is_refused_in_tiered_modes():
    target, drafter, mask = truncated_pair("llama")
    from transformers import DynamicCache

    from viasd_adapt.routing.runner import cache_kwarg_name

    name = cache_kwarg_name(target)
    with pytest.raises(ConfigError, match=f"generate\\({name}=...\\) with the slim tier"):
        tiered_greedy(target, drafter, mask, **{name: DynamicCache(config=target.config)})
