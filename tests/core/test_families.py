"""Families whose decoder layers return tuples (Bloom, Falcon, GPT-Neo), and families we cannot route.

(The HF adapter's lossless == stock check runs over every tiny family, Bloom and Falcon included,
in tests/conformance/test_greedy_identity.py.)

The stubs of a slim view (skipped layers, the capture and inject layers of the shared-prefix
runners) must return what the real layer returns; before they did, Bloom and Falcon crashed with
"not enough values to unpack" on their first slim forward.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM, GenerationConfig, GPTNeoConfig, MambaConfig

import viasd_adapt
from viasd_adapt.adapters import hf
from viasd_adapt.engine.drafters import ModelDrafter
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.errors import UnsupportedModelError
from viasd_adapt.core.hooks import make_plugin_manager
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.routing.shared import SharedPrefixRunners
from viasd_adapt.routing.view import block_output_arities
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


LAYERS = 6
GREEDY = SamplingConfig()


def _model(family: str, seed: int = 0) -> nn.Module:
    if family == "gpt_neo":  # not in tiny.FAMILIES: here only to show the convention is measured, not listed
        torch.manual_seed(seed)
        config = GPTNeoConfig(vocab_size=96, hidden_size=32, num_layers=LAYERS, num_heads=4, max_position_embeddings=512,
                              attention_types=[[["global", "local"], LAYERS // 2]], bos_token_id=0, eos_token_id=0)
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model = tiny_model(family, seed=seed, num_layers=LAYERS)
    with torch.no_grad():  # peaked distributions, so drafts are sometimes accepted
        model.get_output_embeddings().weight.mul_(20.0)
    return model


@pytest.fixture(scope="module", params=["bloom", "falcon", "gpt_neo"])
def target(request):
    return request.param, _model(request.param)


def test_tuple_convention_is_measured(target):
    family, model = target
    arities = block_output_arities(model)
    assert list(arities.values()) == [2], family
    assert list(block_output_arities(tiny_model("llama", num_layers=2)).values()) == [None]


def test_shared_prefix_runners_match_fresh_forwards(target):
    _, model = target
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, [2, 4]))
    runners = SharedPrefixRunners(model, slim)
    gen = torch.Generator().manual_seed(0)
    sequence = torch.randint(0, 96, (5,), generator=gen).tolist()
    for step in range(8):
        sequence = sequence[: len(sequence) - step % 3] + torch.randint(0, 96, (3,), generator=gen).tolist()
        with torch.no_grad():
            fresh_u = slim.model(torch.tensor([sequence])).logits[0, -3:]
            fresh_q = model(torch.tensor([sequence])).logits[0, -2:]
        torch.testing.assert_close(runners.slim_logits(sequence, 3), fresh_u, rtol=0, atol=1e-4)
        torch.testing.assert_close(runners.full_logits(sequence, 2), fresh_q, rtol=0, atol=1e-4)
    assert runners.resumed_full_passes > 0  # q resumed from u's hidden states at s1 = 2


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy"])
def test_engine_runs_and_exact_modes_equal_generate(target, mode):
    _, model = target
    prompt, n = [5, 17, 33, 2, 9], 12
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt]), generation_config=GenerationConfig(
            max_new_tokens=n, do_sample=False, pad_token_id=0, eos_token_id=None))[0, len(prompt):].tolist()
    drafter = ModelDrafter(SlimVerifier(model, RoutingMask.from_skipped(LAYERS, [1, 2, 3, 4])).model, GREEDY)
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, [3, 4])) if mode != "none" else None
    verifier = tiered_verifier(model, TierSettings(mode=mode, gamma=3, adaptive=False), GREEDY, slim=slim,
                               plugin_manager=make_plugin_manager(load_entrypoints=False))
    out = speculative_generate(drafter, verifier, prompt, n)
    assert len(out.tokens) == n
    if mode != "lossy":
        assert out.tokens == reference
    else:
        assert out.metrics.slim_passes > 0


def test_family_without_a_known_layer_path_is_refused_by_name():
    model = AutoModelForCausalLM.from_config(MambaConfig(vocab_size=96, hidden_size=16, num_hidden_layers=2, state_size=4))
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM.*model.layers.*transformer.h"):
        SlimVerifier(model, RoutingMask.full(2))
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM"):
        hf.patch(model, context=viasd_adapt.context(model, settings=TierSettings(mode="none")))
    assert not hf.is_patched(model)


def test_layer_with_an_unknown_output_is_refused_by_name():
    class DictLayer(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, hidden_states, *args, **kwargs):
            return {"hidden": self.inner(hidden_states, *args, **kwargs)}

    model = tiny_model("llama", num_layers=2)
    model.model.layers = nn.ModuleList([DictLayer(layer) for layer in model.model.layers])
    with pytest.raises(UnsupportedModelError, match=r"LlamaForCausalLM \(llama\).*DictLayer returned dict"):
        SlimVerifier(model, RoutingMask.from_skipped(2, [1]))
