"""Bad inputs to the engine loop and the settings types: clear ConfigErrors, never a deep
traceback or a silently wrong run (found by probing as a new user would)."""

from __future__ import annotations

import pytest
import torch

from viasd_adapt.engine import ModelDrafter, TieredVerifier, speculative_generate
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing import RoutingMask, SlimVerifier
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def models():
    return tiny_model("llama", num_layers=4), tiny_model("llama", seed=1, num_layers=1)


class FixedDrafter:
    """A custom drafter (the Drafter protocol) that returns one fixed, possibly broken, block."""

    passes = 0

    def __init__(self, drafts, p):
        self.drafts, self.p = drafts, p

    def propose(self, sequence, gamma, generator):
        return self.drafts, self.p


def _verifier(target, mode="lossy", sampling=GREEDY):
    slim = SlimVerifier(target, RoutingMask.from_skipped(4, [1, 3])) if mode == "lossy" else None
    return TieredVerifier(target, TierSettings(mode=mode), sampling, slim=slim)


UNIFORM = torch.full((1, 96), 1 / 96)


@pytest.mark.parametrize("drafts, p, error, message", [
    (torch.tensor([1, 2]), torch.full((3, 96), 1 / 96), ConfigError, "2 drafts but probabilities of shape"),
    (torch.tensor([1]), torch.full((1, 50), 1 / 50), ModelMismatchError, "cover 50 tokens, the target's 96"),
    (torch.tensor([500]), UNIFORM, ConfigError, "token id 500, outside the vocabulary"),
    (torch.tensor([1]), torch.full((1, 96), float("nan")), ConfigError, "NaN"),  # ran silently before
    (torch.tensor([1.0]), UNIFORM, ConfigError, "1-D integer tensor"),
])
def test_a_custom_drafters_broken_block_is_refused(models, drafts, p, error, message):
    target, _ = models
    with pytest.raises(error, match=message):
        speculative_generate(FixedDrafter(drafts, p), _verifier(target), [1, 2, 3], 4)


def test_engine_argument_types(models):
    target, drafter = models
    with pytest.raises(ModelMismatchError, match="vocabulary mismatch"):  # was an IndexError in torch
        speculative_generate(ModelDrafter(tiny_model("llama", num_layers=1, vocab_size=50), GREEDY), _verifier(target), [1], 3)
    with pytest.raises(ConfigError, match="eos token ids"):  # "12" would have been read as [1, 2]
        speculative_generate(ModelDrafter(drafter, GREEDY), _verifier(target), [1], 3, eos_token_ids="12")
    with pytest.raises(ConfigError, match="torch.Generator"):
        speculative_generate(ModelDrafter(drafter, GREEDY), _verifier(target), [1], 3, generator=5)
    with pytest.raises(ConfigError, match="SamplingConfig"):
        TieredVerifier(target, TierSettings(mode="none"), None)
    with pytest.raises(ConfigError, match="SamplingConfig"):
        ModelDrafter(drafter, "greedy")
    with pytest.raises(ConfigError, match="must be a RoutingMask"):
        SlimVerifier(target, [1, 0, 1, 1])


@pytest.mark.parametrize("build, message", [
    (lambda: TierSettings(mode=None), "mode must be one of"),  # was read as mode "none"
    (lambda: TierSettings(mode=3), "mode must be one of"),
    (lambda: SamplingConfig(do_sample="no", temperature=0.5), "do_sample must be True or False"),  # was sampling
    (lambda: SamplingConfig(do_sample=None), "do_sample must be True or False"),
])
def test_settings_types(build, message):
    with pytest.raises(ConfigError, match=message):
        build()
