"""A target split across devices by a device map (accelerate's big-model placement), on the CPU.

``load_pair(..., device_map=...)`` spreads the char pair's 6-layer target: a dict map sends layers
1, 3 and 5 to disk offload (an offload folder in a temporary directory; their weights are ``meta``
in memory and accelerate's hooks load them per forward), and ``device_map="auto"`` with a
``max_memory`` too small for the whole model makes accelerate split it itself. On such a target:

* lossless mode is token for token stock HF assisted generation (greedy, on 8 prompts) and the
  target's own greedy output, in HF assisted generation and in PEARL;
* under sampling with a fixed seed, every run on the split target gives the very tokens the same
  run gives on the whole target (the split changes where weights live, nothing else);
* the slim pass runs through the hooks: the slim view of the split target gives the logits of the
  slim view of the whole one, and (the control) not the full target's;
* the resumed pass and the shared prefix too: lossy mode, whose q passes resume from the stored
  residual stream at the mask's first skipped layer, gives the same tokens split and whole, with
  resumed passes counted;
* EAGLE, which cannot run such a target, refuses it by name.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.frameworks import HFDriver, PearlDriver
from tests.support.pairs import CHAR_VOCAB, TinyPair, char_mask, greedy_reference, save_char_pair
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.errors import UnsupportedModelError
from viasd_adapt.models.pair import load_pair
from viasd_adapt.models.placement import is_split

#: Layers 1, 3 and 5 of 6 on disk, the rest in the CPU's memory.
DISK_MAP = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu",
            **{f"model.layers.{i}": ("disk" if i % 2 else "cpu") for i in range(6)}}
PROMPTS = [[int(t) for t in torch.randint(4, CHAR_VOCAB, (length,), generator=torch.Generator().manual_seed(seed))]
           for seed, length in enumerate((1, 3, 5, 8, 2, 13, 4, 21))]
NEW_TOKENS = 14
LOSSLESS = {"fixed": TierSettings(mode="lossless", adaptive=False, gamma=4), "adaptive": TierSettings(mode="lossless", gamma=4)}
SAMPLING = SamplingConfig.from_temperature(0.8)


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    return save_char_pair(tmp_path_factory.mktemp("split") / "char", with_mask=True)


@pytest.fixture(scope="module")
def whole(pair_dir):
    return load_pair(pair_dir / "target", pair_dir / "draft", device="cpu")


@pytest.fixture(scope="module")
def on_disk(pair_dir, tmp_path_factory):
    return load_pair(pair_dir / "target", pair_dir / "draft", device_map=DISK_MAP,
                     offload_folder=tmp_path_factory.mktemp("offload"))


@pytest.fixture(scope="module")
def auto_split(pair_dir, tmp_path_factory, whole):
    size = sum(p.numel() * p.element_size() for p in whole.target.parameters())
    return load_pair(pair_dir / "target", pair_dir / "draft", device_map="auto", max_memory={"cpu": size // 2},
                     offload_folder=tmp_path_factory.mktemp("offload-auto"))


def _drivers(loaded):
    tiny = TinyPair(loaded.target, loaded.draft, char_mask())
    return {"hf": HFDriver(tiny, PROMPTS), "pearl": PearlDriver(tiny, PROMPTS)}


def test_the_maps_split_the_target_with_layers_on_disk(whole, on_disk, auto_split):
    for loaded in (on_disk, auto_split):
        assert is_split(loaded.target) and "disk" in set(map(str, loaded.target.hf_device_map.values()))
        assert any(p.device.type == "meta" for p in loaded.target.parameters())  # offloaded: not in memory
        assert loaded.device.type == "cpu" and loaded.draft is not None
    assert not is_split(whole.target)


@pytest.mark.parametrize("framework", ["hf", "pearl"])
def test_lossless_on_the_disk_split_target_is_stock_hf_token_for_token_on_8_prompts(whole, on_disk, framework):
    driver = _drivers(on_disk)[framework]
    stock_driver = _drivers(on_disk)["hf"]
    for prompt in PROMPTS:
        expected = greedy_reference(whole.target, prompt, NEW_TOKENS)
        assert stock_driver.stock(prompt, NEW_TOKENS, 4) == expected  # stock HF on the split target
        for name, settings in LOSSLESS.items():
            out = driver.generate(prompt, NEW_TOKENS, settings)
            assert out.tokens == expected, (framework, name, prompt)
            if name == "fixed" and len(prompt) > 1:
                assert out.metrics.slim_passes > 0  # the tier ran


@pytest.mark.parametrize("framework", ["hf", "pearl"])
def test_lossless_on_the_auto_split_target_is_the_targets_greedy_output(whole, auto_split, framework):
    driver = _drivers(auto_split)[framework]
    for prompt in PROMPTS[:4]:
        expected = greedy_reference(whole.target, prompt, NEW_TOKENS)
        assert driver.generate(prompt, NEW_TOKENS, LOSSLESS["fixed"]).tokens == expected


@pytest.mark.parametrize("framework", ["hf", "pearl"])
@pytest.mark.parametrize("mode", ["none", "lossless"])
def test_sampling_with_a_fixed_seed_gives_the_same_tokens_split_and_whole(whole, on_disk, framework, mode):
    settings = TierSettings(mode=mode, adaptive=False, gamma=4)
    for seed, prompt in enumerate(PROMPTS[:4]):
        runs = [_drivers(loaded)[framework].generate(prompt, NEW_TOKENS, settings, sampling=SAMPLING, seed=seed)
                for loaded in (whole, on_disk)]
        assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == NEW_TOKENS, (framework, mode, prompt)


def test_the_slim_pass_runs_through_the_hooks_and_skips_the_masked_layers(whole, on_disk):
    from viasd_adapt.routing.slim import SlimVerifier

    ids = torch.tensor([PROMPTS[5]])
    with torch.no_grad():
        slim_whole = SlimVerifier(whole.target, char_mask()).model(input_ids=ids).logits
        slim_split = SlimVerifier(on_disk.target, char_mask()).model(input_ids=ids).logits
        full = on_disk.target(input_ids=ids).logits
    torch.testing.assert_close(slim_split, slim_whole)
    assert not torch.allclose(slim_split, full, atol=1e-3)  # control: a view that ran every layer would equal q


@pytest.mark.parametrize("framework", ["hf", "pearl"])
def test_lossy_mode_resumes_q_from_the_shared_prefix_on_the_split_target(whole, on_disk, framework):
    settings = TierSettings(mode="lossy", adaptive=False, gamma=4)
    resumed = 0
    for prompt in PROMPTS:
        runs = [_drivers(loaded)[framework].generate(prompt, NEW_TOKENS, settings) for loaded in (whole, on_disk)]
        assert runs[0].tokens == runs[1].tokens, (framework, prompt)
        assert runs[0].metrics.resumed_full_passes == runs[1].metrics.resumed_full_passes
        resumed += runs[1].metrics.resumed_full_passes
    assert resumed > 0  # the resumed pass ran on the split target


def test_eagle_refuses_a_split_target_by_name(on_disk, whole):
    from dataclasses import replace

    from viasd_adapt.adapters.eagle.compat import load_for_pair

    with pytest.raises(UnsupportedModelError, match=r"eagle framework cannot run a target split by a device map "
                                                    r"\(device_map/offload over cpu, disk\)"):
        load_for_pair(replace(on_disk, eagle_head="eagle_head"))
    # control: the whole target is not refused for its placement (it fails later, on the missing head folder)
    with pytest.raises(Exception) as err:
        load_for_pair(replace(whole, eagle_head="no-such-head"))
    assert "device map" not in str(err.value)
