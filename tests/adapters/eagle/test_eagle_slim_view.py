"""EAGLE's slim tree view runs only the retained layers (also under accelerate's device hooks), and
q's resumed passes (prefix sharing) equal plain full passes, caches included."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

pytest.importorskip("eagle.model.ea_model")

import viasd_adapt
from tests.support.eagle import EARLY_MASK, MASK, NUM_LAYERS, prompts  # noqa: E402
from tests.support.expected_warnings import junk_drafter_warning  # noqa: E402
from viasd_adapt.adapters import eagle  # noqa: E402
from viasd_adapt.adapters.eagle.slim_tree import SlimTreeVerifier  # noqa: E402
from viasd_adapt.adapters.eagle.target import FullTreeVerifier  # noqa: E402
from viasd_adapt.config.mask import RoutingMask  # noqa: E402
from viasd_adapt.core.settings import TierSettings  # noqa: E402


# A four-node tree: root; a and b its children; c a child of a. The path root -> a -> c.
TREE_MASK = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.float32)[None, None]
TREE_POSITIONS = torch.tensor([0, 1, 1, 2])
PATH_NODES = torch.tensor([0, 1, 3])


class LayerCalls:
    """Counts the forward calls of each decoder layer of a base model (pre-hooks on the real layers)."""

    def __init__(self, layers: nn.ModuleList):
        self.counts = [0] * len(layers)
        self.handles = [layer.register_forward_pre_hook(self._hook(i)) for i, layer in enumerate(layers)]

    def _hook(self, index: int):
        def hook(module, args):
            self.counts[index] += 1

        return hook

    def called(self) -> list[int]:
        return [i for i, n in enumerate(self.counts) if n]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _tree_tokens(ea_model) -> torch.Tensor:
    return torch.tensor([[5, 17, 23, 42]]) % ea_model.base_model.config.vocab_size


def _slim_tree_pass(ea_model, mask, record_prefix=False):
    slim = SlimTreeVerifier(ea_model.base_model, mask, record_prefix=record_prefix)
    slim.new_generation()
    ids = prompts(ea_model, 1)[0]
    logits, _ = slim.tree_pass(ids, _tree_tokens(ea_model), TREE_POSITIONS, TREE_MASK)
    return slim, ids, logits


def _assert_only_retained_layers_run(ea_model, mask) -> torch.Tensor:
    layers = ea_model.base_model.model.layers
    calls = LayerCalls(layers)
    try:
        _, _, logits = _slim_tree_pass(ea_model, mask)
        assert calls.called() == list(mask.retained)
        assert all(calls.counts[i] == 1 for i in mask.retained)  # one forward, lag and tree together
    finally:
        calls.remove()
    return logits


def test_slim_tree_view_runs_only_the_retained_layers(ea_model):
    logits = _assert_only_retained_layers_run(ea_model, MASK)
    _assert_only_retained_layers_run(ea_model, EARLY_MASK)
    _, _, full_logits = _slim_tree_pass(ea_model, RoutingMask.full(NUM_LAYERS))
    assert not torch.allclose(logits, full_logits, atol=1e-3)  # the view is not the target
    assert len(ea_model.base_model.model.layers) == NUM_LAYERS  # and the target is untouched


def test_slim_tree_view_runs_only_the_retained_layers_under_accelerate_hooks(tiny_eagle):
    """With ``device_map`` and accelerate's hooks, ``module.forward`` is an instance attribute
    bound to the original module: a view that does not re-bind it silently runs the full target."""
    accelerate = pytest.importorskip("accelerate")
    ea_model = eagle.load_ea_model(tiny_eagle / "target", tiny_eagle / "head", device_map="cpu", sanity_check=False)
    base = ea_model.base_model
    # a single-device map attaches no hooks by itself; force accelerate's own hooks onto the decoder
    accelerate.dispatch_model(base, device_map={"model": "cpu", "lm_head": "cpu"}, force_hooks=True)
    assert hasattr(base.model, "_hf_hook") and "forward" in vars(base.model)
    # power: a plain shallow copy of the hooked decoder (what the adapter built by hand before)
    # still runs every layer of the target
    naive = copy.copy(base.model)
    naive._modules = dict(base.model._modules)
    naive._modules["layers"] = nn.ModuleList([base.model.layers[i] for i in MASK.retained])
    calls = LayerCalls(base.model.layers)
    try:
        with torch.no_grad():
            naive(input_ids=prompts(ea_model, 1)[0], return_dict=False)
        assert calls.called() == list(range(NUM_LAYERS))
    finally:
        calls.remove()
    _assert_only_retained_layers_run(ea_model, MASK)
    ids = prompts(ea_model, 1)[0]
    raw = ea_model.eagenerate(ids, max_new_tokens=12)[0, ids.shape[1] :].tolist()
    tiered = eagle.generate(ea_model, ids, 12,
                            context=viasd_adapt.context(ea_model,
                                                        mask=MASK,
                                                        settings=TierSettings(mode="lossless", adaptive=False)))
    assert tiered.tokens == raw[:12] and tiered.metrics.slim_passes > 0


# --------------------------------------------------------------------------- prefix sharing


def test_resumed_q_pass_equals_a_plain_full_pass_and_leaves_the_same_cache(ea_model):
    """q resumes at s1 from the slim tree pass's h_s1 over the path root -> a -> c of a tree; the
    logits, hidden states and q's whole cache (layers below s1 copied from u) equal a plain
    forward over the same tokens from layer 0."""
    slim, ids, _ = _slim_tree_pass(ea_model, MASK, record_prefix=True)
    assert slim.records_prefix and slim.s1 == 2
    base = ea_model.base_model
    ea_model.eagenerate(ids, max_new_tokens=2)  # eagle allocates its KV cache on first use ...
    base.model.tree_mask = None  # ... and leaves its tree mask set
    with torch.inference_mode():  # q's cache holds the prompt, as after eagle's prefill
        ea_model.current_length_data.zero_()
        base.model(input_ids=ids, past_key_values=ea_model.past_key_values, return_dict=False)
    q = FullTreeVerifier(ea_model, slim)
    q.new_generation(ids.shape[1])
    path = _tree_tokens(ea_model)[0, PATH_NODES].tolist()
    end = ids.shape[1] + len(path)
    for data in ea_model.past_key_values_data:  # so that only what the resumed pass writes is there
        data[..., ids.shape[1] : end, :] = 0.0
    resumed_logits, resumed_hidden = q.resumed(ids, path, PATH_NODES)
    resumed_cache = [data[..., :end, :].clone() for data in ea_model.past_key_values_data]
    assert q.resumed_passes == 1 and q.valid == ids.shape[1]
    q.holds(ids.shape[1])
    plain_logits, plain_hidden = q.forward(ids, path)
    torch.testing.assert_close(resumed_logits, plain_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(resumed_hidden, plain_hidden, rtol=0, atol=1e-5)
    for resumed, plain in zip(resumed_cache, ea_model.past_key_values_data):  # every layer, those below s1 too
        torch.testing.assert_close(resumed, plain[..., :end, :], rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode", ["lossy", "audit"])
def test_lossy_with_a_shared_prefix_decides_exactly_as_without(ea_model, mode):
    settings = TierSettings(mode=mode, alpha1=0.9, alpha2=0.6, adaptive=False)  # the tier on every cycle
    for ids in prompts(ea_model, 2):
        with junk_drafter_warning("eagle", expected=mode == "lossy"):  # the tiny head looks unrelated to the monitor
            shared = eagle.generate(ea_model, ids, 24,
                                    context=viasd_adapt.context(ea_model, mask=MASK, settings=settings))
        with junk_drafter_warning("eagle", expected=mode == "lossy"):  # and it decides the same without the prefix
            separate = eagle.generate(ea_model, ids, 24,
                                      context=viasd_adapt.context(ea_model, mask=MASK, settings=settings),
                                      options=eagle.EagleOptions(share_prefix=False))
        assert shared.tokens == separate.tokens and shared.tiers == separate.tiers
        assert shared.metrics.full_passes == separate.metrics.full_passes > 1
        assert shared.metrics.resumed_full_passes == shared.metrics.full_passes - 1  # every q pass but the prefill
        assert separate.metrics.resumed_full_passes == 0
        assert shared.cache_bytes > separate.cache_bytes  # the h_s1 buffer


def test_a_mask_skipping_layer_0_has_no_prefix_to_share(ea_model):
    ids = prompts(ea_model, 1)[0]
    with junk_drafter_warning("eagle"):  # the tiny head looks unrelated to the monitor
        result = eagle.generate(ea_model, ids, 16,
                                context=viasd_adapt.context(ea_model,
                                                            mask=EARLY_MASK,
                                                            settings=TierSettings(mode="lossy", alpha1=0.9, alpha2=0.6,
                                                                                              adaptive=False)))
    assert len(result.tokens) == 16 and result.metrics.resumed_full_passes == 0
