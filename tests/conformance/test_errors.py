"""Bad input, on every framework: a clear viasd error naming the problem (never a traceback from
deep inside torch, never a silently wrong run), and nothing left patched afterwards.

Framework-specific bad input (batches, padding, streamers, EAGLE's sampling arguments, PEARL's
threads, encoder-decoder sources) is tested in each framework's own modules.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.pairs import noisy_copy
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.core.settings import TierSettings


FRAMEWORKS = ["engine", "hf", "pearl", "eagle", "seq2seq"]
#: case -> (error, message): one framework-neutral expectation each
CASES = {
    "empty-prompt": (ConfigError, "empty"),
    "max-new-tokens-0": (ConfigError, "max_new_tokens"),
    "prompt-outside-vocabulary": (ModelMismatchError, "outside"),
    "mask-with-other-layer-count": (ModelMismatchError, "layers"),
    "mask-artifact-of-another-model": (ModelMismatchError, "another model"),
    "mask-path-of-another-model": (ModelMismatchError, "another model"),
    "mask-file-missing": (ViasdError, "not found"),
    "mask-not-a-mask": (ConfigError, "mask must be"),
    "drafter-with-another-vocabulary": (ModelMismatchError, "vocabulary mismatch"),
    "mode-needs-a-mask": (ConfigError, "needs a routing mask"),
    "settings-not-tier-settings": (ConfigError, "settings must be a TierSettings"),
}
NOT_APPLICABLE = {
    ("engine", "mask-artifact-of-another-model"),  # the engine takes a RoutingMask (SlimVerifier)
    ("engine", "mask-path-of-another-model"),
    ("engine", "mask-file-missing"),
    ("eagle", "drafter-with-another-vocabulary"),  # EAGLE's drafter is its head, checked at load (tests/adapters/eagle)
}
PARAMS = [(framework, case) for framework in FRAMEWORKS for case in CASES if (framework, case) not in NOT_APPLICABLE]


def _arguments(driver, case: str, mode: str, tmp_path) -> dict:
    """The generate() arguments of one bad-input case, otherwise a good lossy call."""
    args = dict(prompt=driver.prompts[0], n=4, settings=TierSettings(mode=mode))
    bad_prompts = driver.bad_prompts()
    if case == "empty-prompt":
        args["prompt"] = bad_prompts["empty"]
    elif case == "max-new-tokens-0":
        args["n"] = 0
    elif case == "prompt-outside-vocabulary":
        args["prompt"] = bad_prompts["outside_vocabulary"]
    elif case == "mask-with-other-layer-count":
        args["mask"] = RoutingMask.from_skipped(driver.mask.num_layers + 2, [1])
    elif case in ("mask-artifact-of-another-model", "mask-path-of-another-model"):
        other = noisy_copy(driver.target, 0.5, seed=9)  # same architecture, other weights
        artifact = MaskArtifact(driver.mask, ratio=driver.mask.ratio, fingerprint=model_fingerprint(other))
        args["mask"] = artifact if case.startswith("mask-artifact") else artifact.save(tmp_path / "mask.json")
    elif case == "mask-file-missing":
        args["mask"] = tmp_path / "missing.json"
    elif case == "mask-not-a-mask":
        args["mask"] = [1, 0, 1, 1]
    elif case == "drafter-with-another-vocabulary":
        args["drafter"] = driver.other_vocab_drafter()
    elif case == "mode-needs-a-mask":
        args["mask"] = None
    elif case == "settings-not-tier-settings":
        args["settings"] = {"mode": mode}
    return args


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
@pytest.mark.parametrize("framework, case", PARAMS)
def test_bad_input_gets_a_clear_error(drivers, request, tmp_path, framework, case, mode):
    driver = drivers.modes(request, framework)
    args = _arguments(driver, case, mode, tmp_path)
    error, message = CASES[case]
    with pytest.raises(error, match=message):
        driver.generate(args.pop("prompt"), args.pop("n"), args.pop("settings"), **args)
    driver.assert_pristine()
    # and the framework still works afterwards
    assert len(driver.generate(driver.prompts[0], 3, TierSettings(mode=mode)).tokens) == 3


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "engine"])
def test_a_mask_artifact_of_this_model_is_accepted_as_object_and_path(drivers, request, tmp_path, framework):
    """The positive side of the fingerprint check: the same mask, fingerprinted on this target."""
    driver = drivers.modes(request, framework)
    artifact = MaskArtifact(driver.mask, ratio=driver.mask.ratio, fingerprint=model_fingerprint(driver.target))
    expected = driver.generate(driver.prompts[0], 6, TierSettings(mode="lossless")).tokens
    for mask in (artifact, artifact.save(tmp_path / "mask.json"), str(tmp_path / "mask.json")):
        assert driver.generate(driver.prompts[0], 6, TierSettings(mode="lossless"), mask=mask).tokens == expected
