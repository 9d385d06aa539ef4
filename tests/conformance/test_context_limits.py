"""Prompt + budget beyond a model's positions: a clear ConfigError at every entry point.

Past the limit, rotary models (Llama) degenerate silently and GPT-2 fails with an IndexError deep
inside torch. The HF adapter's mode ``none`` is a pure pass-through and is *not* checked (it must
behave exactly like stock transformers; see tests/adapters/hf/test_hf_stock_conformance.py).
"""

from __future__ import annotations

import pytest
import torch

import viasd_adapt
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.adapters import hf
from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.engine.drafters import ModelDrafter
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.models.pair import LoadedPair, MaskInfo
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


LIMIT = 512  # every tiny config's positions
LONG = list(range(1, 91)) * 6  # 540 tokens: longer than LIMIT by itself
NEAR = [7] * (LIMIT - 5)  # fits alone, not with 10 new tokens


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def models(request):
    return tiny_model(request.param, seed=0, num_layers=2), tiny_model(request.param, seed=1, num_layers=1)


def _pair(target, draft) -> LoadedPair:
    mask = MaskInfo(RoutingMask.from_skipped(2, [1]), "test", False)
    return LoadedPair(target, draft, None, mask, torch.device("cpu"))


@pytest.mark.parametrize("prompt", [LONG, NEAR], ids=["prompt-too-long", "prompt-plus-budget-too-long"])
def test_engine_refuses_before_running(models, prompt):
    target, draft = models
    verifier = tiered_verifier(target, TierSettings(mode="none"), SamplingConfig())
    with pytest.raises(ConfigError, match=f"exceeds the target's {LIMIT} positions"):
        speculative_generate(ModelDrafter(draft, SamplingConfig()), verifier, prompt, 10)


def test_engine_checks_a_drafter_with_fewer_positions():
    target = tiny_model("gpt2", seed=0, num_layers=2)
    draft = tiny_model("gpt2", seed=1, num_layers=1)
    draft.config.n_positions = 64
    verifier = tiered_verifier(target, TierSettings(mode="none"), SamplingConfig())
    with pytest.raises(ConfigError, match="exceeds the drafter's 64 positions"):
        speculative_generate(ModelDrafter(draft, SamplingConfig()), verifier, [3] * 60, 10)


def test_engine_refuses_token_ids_outside_the_vocabulary(models):
    target, draft = models
    verifier = tiered_verifier(target, TierSettings(mode="none"), SamplingConfig())
    with pytest.raises(ModelMismatchError, match="token id 96 is outside"):
        speculative_generate(ModelDrafter(draft, SamplingConfig()), verifier, [1, 96], 3)


@pytest.mark.parametrize("framework, mode", [("ar", "none"), ("engine", "none"), ("engine", "lossy"), ("hf", "plain"),
                                             ("hf", "none"), ("hf", "lossless"), ("pearl", "lossless")])
def test_every_framework_run_refuses(models, framework, mode):
    target, draft = models
    settings = TierSettings(mode="none" if mode == "plain" else mode, gamma=2)
    request = RunRequest(mode, NEAR, 10, settings)
    with pytest.raises(ConfigError, match=f"exceeds the target's {LIMIT} positions"):
        frameworks.run(framework, _pair(target, draft), request)
    with pytest.raises(ModelMismatchError, match="outside the model's vocabulary"):
        frameworks.run(framework, _pair(target, draft), RunRequest(mode, [1, 500], 3, settings))


def test_hf_tiered_modes_refuse_and_pearl_refuses(models):
    target, draft = models
    ids = torch.tensor([NEAR])
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=RoutingMask.from_skipped(2, [1]),
                                               settings=TierSettings(mode="lossless"))):
        with pytest.raises(ConfigError, match="positions"):
            target.generate(ids, assistant_model=draft, max_new_tokens=10, do_sample=False)
    with pytest.raises(ConfigError, match="positions"):
        pearl_generate(target, draft, NEAR, 10, context=viasd_adapt.context(target, settings=TierSettings(mode="none")))
