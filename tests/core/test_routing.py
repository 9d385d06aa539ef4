"""The slim verifier view, its cache, masks and mask artifacts, on tiny models of every family."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM, DynamicCache

from tests.support import REPO_ROOT
from viasd_adapt.errors import ConfigError, ModelMismatchError, UnsupportedModelError, ViasdError
from viasd_adapt.models.tiny import FAMILIES, tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing import SlimVerifier, find_decoder_stack, model_fingerprint
from viasd_adapt.routing.runner import CachedRunner, cache_kwarg_name, cache_length, truncate_cache
from viasd_adapt.routing.mask import load_mask
from viasd_adapt.routing.mask import random_mask


LAYERS = 6
SEQ = 24  # longer than Gemma2's tiny sliding window (16)
SKIP_SETS = [(0, 2), (1, 3, 4), (5,)]


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request):
    return request.param, tiny_model(request.param, seed=3, num_layers=LAYERS)


def ids_for(seed: int, length: int = SEQ, vocab: int = 96) -> torch.Tensor:
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def forward(model: nn.Module, ids: torch.Tensor, cache=None, **kw) -> torch.Tensor:
    kwargs = {cache_kwarg_name(model): cache, "use_cache": cache is not None}
    with torch.no_grad():
        return model(input_ids=ids, **kwargs, **kw).logits


# ============================================================================== equivalences


def test_full_mask_equals_full_forward_exactly(family_model):
    _, model = family_model
    ids = ids_for(0)
    slim = SlimVerifier(model, RoutingMask.full(LAYERS))
    assert torch.equal(forward(slim.model, ids), forward(model, ids))
    assert torch.equal(forward(slim.model, ids, slim.new_cache()), forward(model, ids))


def reduced_model(model: nn.Module, mask: RoutingMask) -> nn.Module:
    """A model that really has only the retained layers, with the target's weights copied in."""
    stack = find_decoder_stack(model)
    prefix = f"{stack.owner_path}.{stack.attribute}."
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = len(mask.retained)
    if getattr(config, "layer_types", None) is not None:  # keep each retained layer's attention type
        config.layer_types = [config.layer_types[i] for i in mask.retained]
    small = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    renumber = {old: new for new, old in enumerate(mask.retained)}
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith(prefix):
            index, rest = key[len(prefix):].split(".", 1)
            if int(index) not in renumber:
                continue
            key = f"{prefix}{renumber[int(index)]}.{rest}"
        state[key] = value
    missing, unexpected = small.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k or "inv_freq" in k or "bias" in k and "attn" in k for k in missing), missing
    return small


@pytest.mark.parametrize("skipped", SKIP_SETS)
def test_slim_forward_equals_a_model_without_those_layers(family_model, skipped):
    _, model = family_model
    mask = RoutingMask.from_skipped(LAYERS, skipped)
    small = reduced_model(model, mask)
    assert find_decoder_stack(small).num_layers == LAYERS - len(skipped)
    ids = ids_for(1)
    slim = SlimVerifier(model, mask)
    expected = forward(small, ids)
    torch.testing.assert_close(forward(slim.model, ids), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(forward(slim.model, ids, slim.new_cache()), expected, rtol=0, atol=1e-6)
    assert not torch.allclose(expected, forward(model, ids), atol=1e-3)  # skipping really changed something


@pytest.mark.parametrize("skipped", [(0,), (0, 1, 3)])
def test_layer0_skipped_incremental_decoding_equals_full_sequence(family_model, skipped):
    """HF reads the cache length from layer 0, which stays empty when layer 0 is skipped."""
    _, model = family_model
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, skipped))
    ids = ids_for(2)
    expected = forward(slim.model, ids)
    cache = slim.new_cache()
    steps = [forward(slim.model, ids[:, :5], cache)]
    for t in range(5, SEQ):  # no position_ids: the model must find the length through SlimCache
        steps.append(forward(slim.model, ids[:, t : t + 1], cache))
        assert cache.get_seq_length() == t + 1
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=0, atol=1e-5)
    assert cache.layers[0].get_seq_length() == 0  # the skipped layer never stored anything


def test_full_cache_and_outputs_unchanged_by_any_number_of_slim_passes(family_model):
    _, model = family_model
    ids = ids_for(3)
    slims = [SlimVerifier(model, RoutingMask.from_skipped(LAYERS, s)) for s in SKIP_SETS]

    def run_full(interleave: int):
        cache = DynamicCache(config=model.config)
        outs = [forward(model, ids[:, :6], cache)]
        for t in range(6, SEQ, 3):
            for i in range(interleave):  # slim passes over the same and other prefixes, own caches
                slim = slims[i % len(slims)]
                forward(slim.model, ids[:, : t + i + 1], slim.new_cache())
            outs.append(forward(model, ids[:, t : t + 3], cache))
        keys = [layer.keys.clone() for layer in cache.layers]
        return torch.cat(outs, dim=1), keys

    plain_logits, plain_keys = run_full(0)
    for n in (1, 4):
        logits, keys = run_full(n)
        assert torch.equal(logits, plain_logits)
        assert all(torch.equal(a, b) for a, b in zip(keys, plain_keys))


def test_target_is_not_mutated_and_weights_are_shared(family_model):
    _, model = family_model
    stack = find_decoder_stack(model)
    layer_ids = [id(layer) for layer in stack.layers]
    list_id = id(stack.layers)
    params_before = {name: (p.data_ptr(), p.clone()) for name, p in model.named_parameters()}
    ids = ids_for(4)
    logits_before = forward(model, ids)

    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (0, 3)))
    forward(slim.model, ids, slim.new_cache())

    after = find_decoder_stack(model)
    assert id(after.layers) == list_id and [id(layer) for layer in after.layers] == layer_ids
    for name, p in model.named_parameters():
        ptr, value = params_before[name]
        assert p.data_ptr() == ptr and torch.equal(p, value), name
    assert torch.equal(forward(model, ids), logits_before)
    # The view owns no tensor of its own: every parameter is one of the target's.
    target_ptrs = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in slim.model.parameters()} <= target_ptrs
    slim_stack = find_decoder_stack(slim.model)
    assert slim_stack.layers is not stack.layers
    assert slim_stack.layers[1] is stack.layers[1]
    assert type(slim_stack.layers[0]).__name__ == "PassThroughLayer"


def test_hidden_states_of_target_and_view_stay_separate(family_model):
    """transformers records hidden states with lazily installed hooks; the shared layers must not
    end up with two, or the target returns every layer twice."""
    family, model = family_model
    ids = ids_for(9, length=8)
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (1, 3)))
    with torch.no_grad():  # the view asks for hidden states first: that is when the hooks get installed
        view_out = slim.model(input_ids=ids, output_hidden_states=True)
        target_out = model(input_ids=ids, output_hidden_states=True)
        fresh_out = tiny_model(family, seed=3, num_layers=LAYERS)(input_ids=ids, output_hidden_states=True)
    assert len(target_out.hidden_states) == len(fresh_out.hidden_states) == LAYERS + 1
    assert all(torch.equal(a, b) for a, b in zip(target_out.hidden_states, fresh_out.hidden_states))
    if len(view_out.hidden_states) == LAYERS + 1:
        # Families that collect hidden states in their own layer loop (Bloom, Falcon) report one per
        # layer index; a skipped layer's output is then its input, unchanged.
        assert family in ("bloom", "falcon")
        for i in slim.mask.skipped:
            assert torch.equal(view_out.hidden_states[i], view_out.hidden_states[i + 1])
    else:  # recorded by transformers' hooks: embeddings + retained layers
        assert len(view_out.hidden_states) == 1 + len(slim.mask.retained)


def test_hooks_registered_on_the_view_do_not_reach_the_target():
    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (2,)))
    calls = []
    handles = [slim.model.register_forward_hook(lambda *a: calls.append("root")),
               slim.model.model.register_forward_pre_hook(lambda *a: calls.append("owner"))]
    try:
        forward(model, ids_for(10, length=4))
        assert calls == []
        forward(slim.model, ids_for(10, length=4))
        assert sorted(calls) == ["owner", "root"]
    finally:
        for handle in handles:
            handle.remove()


def test_view_is_routed_even_when_forward_is_wrapped_on_the_instance():
    """accelerate-style hooks replace ``module.forward`` with a partial bound to the module; the
    view must not keep calling the target's own modules (which would make u == q silently)."""
    import functools

    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    mask = RoutingMask.from_skipped(LAYERS, (1, 3, 5))
    ids = ids_for(11, length=6)
    unwrapped = forward(SlimVerifier(model, mask).model, ids)

    def new_forward(module, *args, **kwargs):
        return module._old_forward(*args, **kwargs)

    for module in (model, model.model):
        module._old_forward = module.forward
        module.forward = functools.update_wrapper(functools.partial(new_forward, module), module._old_forward)
    slim = SlimVerifier(model, mask)
    assert torch.equal(forward(slim.model, ids), unwrapped)
    assert not torch.equal(forward(slim.model, ids), forward(model, ids))
    assert torch.equal(forward(slim.model, ids, slim.new_cache()), unwrapped)


def test_a_decorator_around_forward_is_refused_but_one_around_to_is_dropped_on_the_view():
    """A ``functools.wraps`` wrapper around the instance's ``forward`` cannot be re-pointed at the
    view's layers: refused (it would run the full model). accelerate's ``dispatch_model`` wraps
    ``.to`` that way to warn about moving a dispatched model; a view never moves through it, so the
    view gets the plain method, and its forward stays routed."""
    import functools

    def warning_wrapper(method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            return method(*args, **kwargs)

        return wrapper

    mask = RoutingMask.from_skipped(LAYERS, (1, 3, 5))
    ids = ids_for(12, length=6)
    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    unwrapped = forward(SlimVerifier(model, mask).model, ids)
    model.to = warning_wrapper(model.to)
    slim = SlimVerifier(model, mask)
    assert torch.equal(forward(slim.model, ids), unwrapped)
    assert slim.model.to.__self__ is slim.model  # the plain method, bound to the view
    wrapped_forward = tiny_model("llama", seed=0, num_layers=LAYERS)
    wrapped_forward.model.forward = warning_wrapper(wrapped_forward.model.forward)
    with pytest.raises(UnsupportedModelError, match="forward was replaced on the instance"):
        SlimVerifier(wrapped_forward, mask)


# ============================================================================== caches


def test_cached_runner_on_slim_view_matches_full_sequence_under_crops(family_model):
    _, model = family_model
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (0, 4)))
    seq = ids_for(5, length=40)[0].tolist()
    expected = forward(slim.model, torch.tensor([seq]))[0]
    runner = CachedRunner(slim.model, slim.new_cache)
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        n = int(torch.randint(2, 41, (1,), generator=gen))
        tail = int(torch.randint(1, min(n, 5) + 1, (1,), generator=gen))
        torch.testing.assert_close(runner.logits_for(seq[:n], tail), expected[n - tail : n], rtol=0, atol=1e-5)


def test_truncate_cache_crops_retained_layers_and_leaves_skipped_empty():
    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (0, 2)))
    cache = slim.new_cache()
    forward(slim.model, ids_for(6, length=10), cache)
    assert [layer.get_seq_length() for layer in cache.layers] == [0, 10, 0, 10, 10, 10]
    assert cache_length(cache) == 10 and cache.get_seq_length() == 10
    truncate_cache(cache, 7)
    assert [layer.get_seq_length() for layer in cache.layers] == [0, 7, 0, 7, 7, 7]
    truncate_cache(cache, 9)  # never grows
    assert cache_length(cache) == 7
    # Decoding continues correctly from the truncated cache.
    ids = ids_for(6, length=10)
    resumed = forward(slim.model, ids[:, 7:], cache, position_ids=torch.arange(7, 10).unsqueeze(0))
    torch.testing.assert_close(resumed, forward(slim.model, ids)[:, 7:], rtol=0, atol=1e-5)


def test_slim_cache_answers_length_queries_from_a_retained_layer_of_the_same_type():
    model = tiny_model("gemma2", seed=0, num_layers=LAYERS)
    types = model.config.layer_types
    assert len(set(types)) == 2  # alternating sliding / full attention
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (0, 1)))
    cache = slim.new_cache()
    forward(slim.model, ids_for(7, length=20), cache)
    assert cache.layers[0].get_seq_length() == 0 and cache.layers[1].get_seq_length() == 0
    for skipped in (0, 1):
        stand_in = cache._stand_in(skipped)
        assert stand_in not in (0, 1) and types[stand_in] == types[skipped]
        assert cache.get_seq_length(skipped) == 20


def test_slim_cache_holds_only_retained_layers():
    model = tiny_model("qwen2", seed=0, num_layers=LAYERS)
    full_runner = CachedRunner(model)
    slim = SlimVerifier(model, RoutingMask.from_skipped(LAYERS, (1, 2, 4)))
    slim_runner = CachedRunner(slim.model, slim.new_cache)
    seq = ids_for(8, length=30)[0].tolist()
    full_runner.logits_for(seq, 1)
    slim_runner.logits_for(seq, 1)
    assert slim_runner.cache_bytes() * LAYERS == full_runner.cache_bytes() * 3


# ============================================================================== discovery and masks


def test_unsupported_model_names_the_paths_tried():
    class Strange(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])

    with pytest.raises(UnsupportedModelError) as err:
        find_decoder_stack(Strange())
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        assert path in str(err.value)
    assert "Strange" in str(err.value)
    with pytest.raises(UnsupportedModelError):
        SlimVerifier(Strange(), RoutingMask.full(1))


@pytest.mark.parametrize("family, owner", [("llama", "model"), ("gemma2", "model"), ("gpt2", "transformer"), ("gpt_neox", "gpt_neox")])
def test_layer_discovery_per_family(family, owner):
    stack = find_decoder_stack(tiny_model(family, num_layers=3))
    assert stack.owner_path == owner and stack.num_layers == 3


def test_routing_mask_constructors_and_views():
    mask = RoutingMask.from_skipped(6, [4, 1, 1])
    assert mask.skipped == (1, 4) and mask.retained == (0, 2, 3, 5)
    assert mask.bits() == [1, 0, 1, 1, 0, 1] and str(mask) == "101101"
    assert mask.num_skipped == 2 and mask.ratio == pytest.approx(2 / 6)
    assert RoutingMask.from_bits(torch.tensor([1, 0, 1, 1, 0, 1])) == mask
    assert RoutingMask.full(3).skipped == ()
    first = random_mask(20, 0.45, torch.Generator().manual_seed(1))
    assert first.num_skipped == 9  # round(0.45 * 20)
    assert random_mask(20, 0.45, torch.Generator().manual_seed(1)) == first
    assert len({random_mask(20, 0.45, torch.Generator().manual_seed(s)) for s in range(10)}) > 1


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: RoutingMask(()), "at least one layer"),
        (lambda: RoutingMask((False, False)), "keep at least one"),
        (lambda: RoutingMask.from_skipped(4, [4]), "out of range"),
        (lambda: RoutingMask.from_skipped(4, [-1]), "out of range"),
        (lambda: RoutingMask.from_skipped(3, [0, 1, 2]), "cannot skip"),
        (lambda: RoutingMask.from_bits([1, 2, 0]), "0/1"),
        (lambda: random_mask(6, 0.0), "ratio"),
        (lambda: random_mask(6, 1.0), "ratio"),
        (lambda: random_mask(2, 0.9), "at least one layer must remain"),
        (lambda: random_mask(6, 0.05), "skips no layer"),
    ],
)
def test_routing_mask_validation(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_mask_for_wrong_layer_count_is_refused():
    model = tiny_model("llama", num_layers=4)
    with pytest.raises(ModelMismatchError, match="4 decoder layers"):
        SlimVerifier(model, RoutingMask.from_skipped(6, [1]))


def test_mask_artifact_round_trip_and_model_checks(tmp_path):
    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    mask = RoutingMask.from_skipped(LAYERS, [1, 4])
    search = {"steps": 10, "seed": 0, "patience": 0, "ratio": 0.33, "alpha1": 0.5, "alpha2": 0.3, "beta": 1.0,
              "objective": "margin", "strategy": "dimr"}
    artifact = MaskArtifact(
        mask, ratio=0.33, score=1.25, delta=0.5, search=search, fingerprint=model_fingerprint(model)
    )
    path = artifact.save(tmp_path / "sub" / "mask.json")
    data = json.loads(path.read_text())
    assert data["mask"] == [1, 0, 1, 1, 0, 1] and data["skipped_layers"] == [1, 4]
    assert data["fingerprint"]["num_layers"] == LAYERS and data["fingerprint"]["architecture"] == "LlamaForCausalLM"

    loaded = load_mask(path, model)
    assert loaded.mask == mask and (loaded.ratio, loaded.score, loaded.delta) == (0.33, 1.25, 0.5)
    assert loaded.search.model_dump() == search and loaded.fingerprint == artifact.fingerprint
    # The same weights in another object (a reload) match; another checkpoint does not.
    load_mask(path, copy.deepcopy(model))
    with pytest.raises(ModelMismatchError, match="sampled entries differ"):
        load_mask(path, tiny_model("llama", seed=1, num_layers=LAYERS))
    with pytest.raises(ModelMismatchError, match="architecture"):
        load_mask(path, tiny_model("qwen2", seed=0, num_layers=LAYERS))
    with pytest.raises(ModelMismatchError, match="decoder layers"):
        load_mask(path, tiny_model("llama", seed=0, num_layers=8))


def test_mask_artifact_bad_files(tmp_path):
    with pytest.raises(ViasdError, match="not found"):
        MaskArtifact.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        MaskArtifact.load(broken)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ConfigError, match="routing-mask"):
        MaskArtifact.load(other)
    other.write_text("[1, 0, 1]")  # valid JSON, wrong shape
    with pytest.raises(ConfigError, match="routing-mask"):
        MaskArtifact.load(other)
    other.write_text(json.dumps({"format": "viasd-adapt/routing-mask", "mask": [1, 0, 1], "ratio": "half"}))
    with pytest.raises(ConfigError, match="ratio"):
        MaskArtifact.load(other)


# ============================================================================== memory


def test_slim_memory_benchmark_measures_only_the_retained_layers_kv(capsys):
    import importlib.util

    path = REPO_ROOT / "benchmarks" / "slim_memory.py"
    spec = importlib.util.spec_from_file_location("slim_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--preset", "tiny", "--context", "48", "--new-tokens", "6"])
    assert "tensor-memory ratio" in capsys.readouterr().out
    assert result["weight_sharing"]["extra_parameter_bytes"] == 0
    full_only, with_slim, shared = result["rows"]
    assert full_only["slim_kv_bytes"] == 0 and full_only["tokens"] == with_slim["tokens"] == shared["tokens"] == 6
    # the shared prefix stores the layers below s1 once: less than separate caches, by those layers
    s1 = min(result["skipped_layers"])
    assert shared["verifier_tensor_bytes"] < with_slim["verifier_tensor_bytes"] or s1 == 0
    assert shared["full_kv_bytes"] == pytest.approx(with_slim["full_kv_bytes"], rel=0.1)
    retained = result["layers"] - len(result["skipped_layers"])
    # Per layer, u's cache is as long as q's up to the last block's few unverified tokens.
    per_layer_slim = with_slim["slim_kv_bytes"] / retained
    per_layer_full = with_slim["full_kv_bytes"] / result["layers"]
    assert per_layer_slim == pytest.approx(per_layer_full, rel=0.1)
    expected = (with_slim["parameter_bytes"] + with_slim["full_kv_bytes"] + with_slim["slim_kv_bytes"]) / (
        full_only["parameter_bytes"] + full_only["full_kv_bytes"]
    )
    assert result["tensor_memory_ratio"] == pytest.approx(expected)
    assert 1.0 < result["tensor_memory_ratio"] < 1.0 + retained / result["layers"]
