"""The Delta rule and the verdict: the product says, with numbers, when the slim tier does not pay."""

from __future__ import annotations

import warnings

import pytest
import torch

import viasd_adapt
from viasd_adapt.config.advice import NegativeDeltaWarning, delta_message, warn_if_negative_delta
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.context import open_context


def test_delta_message_names_the_numbers_only_when_negative():
    assert delta_message(None) is None and delta_message(3.0) is None
    message = delta_message(-28.8, {"alpha1": 0.5, "alpha2": 0.3})
    assert "-28.8" in message and "0.5/0.3" in message and "viasd tune" in message and "lenient" in message


@pytest.mark.parametrize("delta,mode,warned", [(-5.0, "lossy", True), (-5.0, "audit", True), (-5.0, "lossless", False),
                                               (-5.0, "lenient", False), (2.0, "lossy", False)])
def test_opening_a_lossy_tier_on_a_negative_delta_mask_warns(tmp_path, delta, mode, warned):
    target = tiny_model("llama", 0)
    path = MaskArtifact(RoutingMask.from_skipped(6, [2, 4]), 2 / 6, delta=delta,
                        fingerprint=model_fingerprint(target)).save(tmp_path / "mask.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = open_context(target, path, TierSettings(mode=mode)).settings
    assert settings.mode.value == mode
    assert any(issubclass(w.category, NegativeDeltaWarning) for w in caught) == warned
    assert warn_if_negative_delta(RoutingMask.from_skipped(6, [2, 4]), TierSettings()) is None  # no artifact, no Delta
    # the advice reads no file: it is given the artifact open_context already read
    assert warn_if_negative_delta(str(path), TierSettings()) is None


def test_hf_tiered_warns_with_the_shipped_demo_mask():
    from transformers import AutoModelForCausalLM

    from viasd_adapt.adapters import hf
    from viasd_adapt.models.registry import demo_pair_paths

    pair = demo_pair_paths()
    target = AutoModelForCausalLM.from_pretrained(str(pair.target), dtype=torch.float32)
    with pytest.warns(NegativeDeltaWarning, match="Delta"):
        with hf.tiered(target,
                       context=viasd_adapt.context(target, mask=pair.mask, settings=TierSettings(mode="lossy"))):
            pass
