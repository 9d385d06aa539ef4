"""EAGLE adapter on a tiny Llama: what is particular to it: transformers-5 compat, the load-time
sanity check, head training and evaluation, EAGLE's own arguments and options, eagle's budget
overshoot and EOS, the CLI and the registry entry's cache sizes. Everything is built in seconds
from configs (no download); the fixtures ``tiny_eagle`` and ``ea_model`` live in conftest.py, the
shared pieces in tests/support/eagle.py.

Greedy identity (both lossless strategies, lenient at 0), sampling (a KS test of PIT values),
the mode invariants, errors shared by every framework and scopes are tested on EAGLE in
tests/conformance/."""

from __future__ import annotations

import json

import pytest
import torch

eagle_pkg = pytest.importorskip("eagle.model.ea_model")

import viasd_adapt
from tests.support.eagle import MASK, NUM_LAYERS, prompts as _prompts  # noqa: E402
from tests.support.expected_warnings import junk_drafter_warning  # noqa: E402
from viasd_adapt.adapters import eagle  # noqa: E402
from viasd_adapt.adapters.eagle.compat import (  # noqa: E402
    TRANSFORMERS_MAJOR,
    check_base_model,
    eagle_compat,
    repair_rotary_caches,
)
from viasd_adapt.errors import ConfigError, ModelMismatchError  # noqa: E402
from viasd_adapt.training.eagle_head import train_eagle_head  # noqa: E402
from viasd_adapt.config.mask import MaskArtifact, RoutingMask  # noqa: E402
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.core.settings import TierSettings  # noqa: E402


# --------------------------------------------------------------------------- compat layer


@pytest.mark.skipif(TRANSFORMERS_MAJOR < 5, reason="the breakage is specific to transformers 5")
def test_raw_eagle_cannot_load_on_transformers5(tiny_eagle):
    from eagle.model.modeling_llama_kv import LlamaForCausalLM as EagleLlama

    with pytest.raises(KeyError):
        EagleLlama.from_pretrained(tiny_eagle / "target")


def test_compat_scope_restores_everything_even_on_error():
    from eagle.model import cnets, modeling_llama_kv as kv

    before = (kv.LlamaAttention._init_rope, cnets.LlamaAttention._init_rope, kv.LlamaForCausalLM.__dict__.get("_tied_weights_keys"))
    with pytest.raises(RuntimeError):
        with eagle_compat():
            assert kv.LlamaAttention._init_rope is not before[0]
            raise RuntimeError("boom")
    after = (kv.LlamaAttention._init_rope, cnets.LlamaAttention._init_rope, kv.LlamaForCausalLM.__dict__.get("_tied_weights_keys"))
    assert after == before


def test_load_passes_sanity_check_and_matches_stock_greedy(ea_model, tiny_eagle):
    report = ea_model.viasd_sanity
    assert report.max_abs_diff_plain < 1e-4 and report.max_abs_diff_cached < 1e-4
    assert report.argmax_agreement == 1.0
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(tiny_eagle / "target", dtype=torch.float32).eval()
    ids = _prompts(ea_model, 1)[0]
    plain = ea_model.eagenerate(ids, max_new_tokens=12)[0, ids.shape[1] :]
    reference = stock.generate(ids, max_new_tokens=plain.shape[0], do_sample=False)[0, ids.shape[1] :]
    assert plain.tolist() == reference.tolist()


def _load_base_without_repair(path):
    from eagle.model.modeling_llama_kv import LlamaForCausalLM as EagleLlama

    with eagle_compat():
        return EagleLlama.from_pretrained(path, dtype=torch.float32).eval()


def test_unrepaired_rotary_caches_are_refused(tiny_eagle):
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(tiny_eagle / "target", dtype=torch.float32).eval()
    base = _load_base_without_repair(tiny_eagle / "target")
    if TRANSFORMERS_MAJOR >= 5:
        with pytest.raises(ModelMismatchError, match="non-finite|disagrees"):
            check_base_model(base, stock)
    assert repair_rotary_caches(base) == NUM_LAYERS
    assert check_base_model(base, stock).max_abs_diff_plain < 1e-4


def test_deliberately_broken_model_is_refused(tiny_eagle):
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(tiny_eagle / "target", dtype=torch.float32).eval()
    base = _load_base_without_repair(tiny_eagle / "target")
    repair_rotary_caches(base)
    with torch.no_grad():
        base.model.layers[3].mlp.down_proj.weight.mul_(-1.0)
    with pytest.raises(ModelMismatchError, match="disagrees"):
        check_base_model(base, stock)
    other = AutoModelForCausalLM.from_pretrained(tiny_eagle / "other", dtype=torch.float32).eval()
    base_ok = _load_base_without_repair(tiny_eagle / "target")
    repair_rotary_caches(base_ok)
    with pytest.raises(ModelMismatchError):
        check_base_model(base_ok, other)


# --------------------------------------------------------------------------- head


def test_head_layout_and_config(tiny_eagle):
    config = json.loads((tiny_eagle / "head" / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["num_hidden_layers"] == 1 and config["bias"] is True
    assert (tiny_eagle / "head" / "pytorch_model.bin").is_file()
    assert config["viasd_training"]["steps"] == 40
    state = torch.load(tiny_eagle / "head" / "pytorch_model.bin")
    assert "fc.weight" in state and "embed_tokens.weight" in state


def test_head_training_is_seeded(tiny_eagle, tmp_path):
    a = train_eagle_head(tiny_eagle / "target", tmp_path / "a", seed=5, steps=3, batch_size=2, seq_len=16, max_train_chars=20_000)
    b = train_eagle_head(tiny_eagle / "target", tmp_path / "b", seed=5, steps=3, batch_size=2, seq_len=16, max_train_chars=20_000)
    c = train_eagle_head(tiny_eagle / "target", tmp_path / "c", seed=6, steps=3, batch_size=2, seq_len=16, max_train_chars=20_000)
    sa, sb, sc = (torch.load(p / "pytorch_model.bin") for p in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["fc.weight"], sc["fc.weight"])


# --------------------------------------------------------------------------- bad input


def test_head_for_another_base_model_is_refused(tiny_eagle, ea_model):
    with pytest.raises(ModelMismatchError, match="another base model"):
        eagle.load_ea_model(tiny_eagle / "other", tiny_eagle / "head")
    saved = ea_model.ea_layer.embed_tokens.weight.data.clone()
    try:
        ea_model.ea_layer.embed_tokens.weight.data.normal_()
        with pytest.raises(ModelMismatchError, match="another base model"):
            eagle.generate(ea_model, _prompts(ea_model, 1)[0], 4,
                           context=viasd_adapt.context(ea_model, mask=MASK, settings=TierSettings(mode="lossy")))
    finally:
        ea_model.ea_layer.embed_tokens.weight.data.copy_(saved)
    assert not eagle.is_patched()


def test_eagles_own_arguments(ea_model):
    """Bad input every framework refuses is tested on EAGLE in tests/conformance/test_errors.py."""
    ids = _prompts(ea_model, 1)[0]
    with pytest.raises(ConfigError, match="batch size|one sequence"):
        eagle.generate(ea_model, ids.repeat(2, 1), 4,
                       context=viasd_adapt.context(ea_model, mask=MASK, settings=TierSettings(mode="lossy")))
    with pytest.raises(ConfigError, match="top_p"):
        eagle.generate(ea_model, ids, 4, temperature=1.0, top_p=0.0)
    with pytest.raises(ConfigError, match="positions"):
        eagle.generate(ea_model, ids, 10_000)
    with pytest.raises(ConfigError, match="temperature"):
        eagle.generate(ea_model, ids, 4, temperature=float("nan"))
    assert not eagle.is_patched()


# --------------------------------------------------------------------------- modes


def test_max_new_tokens_overshoot_is_trimmed(ea_model):
    ids = _prompts(ea_model, 1)[0]
    result = eagle.generate(ea_model, ids, 7, context=viasd_adapt.context(ea_model, settings=TierSettings(mode="none")))
    assert result.raw_new_tokens > 7  # upstream eagenerate overshoots ...
    assert len(result.tokens) == 7 and result.metrics.committed == 7  # ... the adapter does not


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy"])
def test_your_own_eagenerate_in_a_scope_returns_the_budget_as_stock_hf_does(ea_model, mode):
    """Inside ``eagle.tiered`` a call for n tokens returns n (or fewer, ending at EOS), the first n
    of what eagle commits, with metrics for those n; the scope leaves the EaModel's own method behind.
    Control: the same call without a scope overshoots. Another thread's call is eagle's, untrimmed."""
    import threading

    ids, n = _prompts(ea_model, 1)[0], 7
    stock = ea_model.eagenerate(ids, max_new_tokens=n)[0, ids.shape[1]:].tolist()
    ea_model.base_model.model.tree_mask = None
    assert len(stock) > n  # control: eagle overshoots
    settings = TierSettings(mode=mode, adaptive=False)
    with eagle.tiered(ea_model,
                      context=viasd_adapt.context(ea_model,
                                                  mask=None if mode == "none" else MASK, settings=settings)) as session:
        out = session.ea_model.eagenerate(ids, max_new_tokens=n)[0, ids.shape[1]:].tolist()
        other: list = []
        thread = threading.Thread(target=lambda: other.append(ea_model.eagenerate(ids, max_new_tokens=n)))
        thread.start()
        thread.join()
    assert len(out) == n and session.last_metrics.committed == n
    if mode != "lossy":
        assert out == stock[:n]  # none and lossless: eagle's greedy tokens
    assert other[0].shape[1] - ids.shape[1] > n  # a thread without a scope gets eagle's own call
    assert "eagenerate" not in vars(ea_model)


@pytest.mark.skipif(TRANSFORMERS_MAJOR < 5, reason="transformers 4 has no such notices to drop")
def test_eagles_deprecation_notices_are_dropped_in_the_scope_and_only_there(ea_model):
    """transformers 5 notices about eagle-llm's code (`use_return_dict`, `past_key_values`) do not
    reach the user of a scope; outside it (control: stock eagle), in another thread and after the
    scope they do. transformers prints each once per process, so the test resets its once-cache."""
    import logging
    import threading

    from viasd_adapt.adapters.eagle import compat
    from viasd_adapt.adapters.eagle.compat import EAGLE_DEPRECATION_NOTICES

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    def notices() -> list[str]:
        found = [start for _, start in EAGLE_DEPRECATION_NOTICES if any(m.startswith(start) for m in seen)]
        seen.clear()
        logging.Logger.warning_once.cache_clear()
        return found

    handler, loggers = Keep(), [logging.getLogger(name) for name, _ in EAGLE_DEPRECATION_NOTICES]
    for logger in loggers:
        logger.addHandler(handler)
    every = [start for _, start in EAGLE_DEPRECATION_NOTICES]
    try:
        notices()
        ids = _prompts(ea_model, 1)[0]
        ea_model.eagenerate(ids, max_new_tokens=4)
        ea_model.base_model.model.tree_mask = None
        assert notices() == every  # control: stock eagle on transformers 5 triggers both
        with eagle.tiered(ea_model,
                          context=viasd_adapt.context(ea_model,
                                                      settings=TierSettings(mode="lossless"), mask=MASK)) as session:
            session.ea_model.eagenerate(ids, max_new_tokens=4)
            assert notices() == []
            elsewhere = threading.Thread(target=lambda: [logging.getLogger(name).warning_once(start + "!")
                                                         for name, start in EAGLE_DEPRECATION_NOTICES])
            elsewhere.start()
            elsewhere.join()
            assert notices() == every  # another thread's notices pass
        for name, start in EAGLE_DEPRECATION_NOTICES:
            logging.getLogger(name).warning_once(start + "!")
        assert notices() == every  # after the scope, nothing is filtered
        assert all(compat._DEPRECATIONS not in logger.filters for logger in loggers)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


# --------------------------------------------------------------------------- CLI


def test_viasd_generate_framework_eagle_every_mode(tiny_eagle, ea_model, tmp_path):
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    MaskArtifact(MASK, ratio=MASK.ratio, fingerprint=model_fingerprint(ea_model.base_model)).save(tmp_path / "mask.json")
    for mode in ("none", "lenient", "lossless", "lossy", "audit"):
        out = tmp_path / f"{mode}.json"
        result = CliRunner().invoke(cli, [
            "generate", "--framework", "eagle", "--target", str(tiny_eagle / "target"),
            "--eagle-head", str(tiny_eagle / "head"), "--mask", str(tmp_path / "mask.json"), "--mode", mode,
            "--prompt", "def main(argv):\n    ", "--max-new-tokens", "9", "--json", str(out), "--no-color",
        ])
        assert result.exit_code == 0, result.output
        data = json.loads(out.read_text())
        assert data["mode"] == mode and len(data["tokens"]) == 9 == data["metrics"]["committed"]
        assert len(data["tiers"]) == 9
    missing_head = CliRunner().invoke(cli, ["generate", "--framework", "eagle", "--target", str(tiny_eagle / "target"),
                                            "--mode", "none", "--prompt", "x"])
    assert missing_head.exit_code != 0 and "--eagle-head" in missing_head.output


def test_evaluate_head_scores_target_and_slim_features(tiny_eagle):
    from viasd_adapt.training.eagle_head import evaluate_head

    same = evaluate_head(tiny_eagle / "target", tiny_eagle / "head", RoutingMask.full(NUM_LAYERS), rows=2, seq_len=32)
    assert same["top1_agreement_slim_features"] == same["top1_agreement_target_features"]
    routed = evaluate_head(tiny_eagle / "target", tiny_eagle / "head", MASK, rows=2, seq_len=32)
    assert 0.0 <= routed["top1_agreement_slim_features"] <= 1.0 and routed["skipped_layers"] == [2, 4]


def test_scopes_cannot_nest(ea_model):
    from viasd_adapt.errors import ViasdError

    with eagle.tiered(ea_model,
                      context=viasd_adapt.context(ea_model, mask=MASK, settings=TierSettings(mode="lossless"))):
        with pytest.raises(ViasdError, match="already active"):
            with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, settings=TierSettings(mode="none"))):
                pass
        assert eagle.is_patched()
    assert not eagle.is_patched()


def test_greedy_argmax_plugin_accepts_the_verifiers_own_choice():
    from viasd_adapt.core.plugins import GreedyArgmaxAcceptance

    assert eagle.GreedyArgmaxAcceptance is GreedyArgmaxAcceptance  # moved to the core, re-exported
    plugin = GreedyArgmaxAcceptance()
    settings = TierSettings(mode="lossy")
    tokens = torch.tensor([0, 1])
    p = torch.tensor([[0.9, 0.1, 0.0], [0.1, 0.9, 0.0]])  # sharp drafter
    u = torch.tensor([[0.4, 0.3, 0.3], [0.5, 0.3, 0.2], [0.3, 0.3, 0.4]])  # flat verifier, argmax 0 then 0
    from viasd_adapt.core.rules import BUILTIN_RULES

    assert BUILTIN_RULES.viasd_gate1_accept_prob(tokens=tokens, p=p, u=u, settings=settings, greedy=True).tolist() == [0.0, 0.0]
    assert plugin.viasd_gate1_accept_prob(tokens, p, u, settings, True).tolist() == [1.0, 0.0]
    assert plugin.viasd_escalation_accept_prob(tokens, p, u, settings, True).tolist() == [1.0, 0.0]
    assert plugin.viasd_gate1_accept_prob(tokens, p, u, settings, False) is None


@pytest.mark.parametrize("mode, hook, after_path", [
    ("lenient", "viasd_lenient_accept_prob", 1),  # q's bonus
    ("lossless", "viasd_lossless_accept_prob", 2),  # the cascade: u's bonus, then q's
    ("lossy", "viasd_gate1_accept_prob", 1),  # u resolves the bonus
])
def test_the_path_is_chosen_by_the_steps_rules(ea_model, mode, hook, after_path):
    """A plugin that accepts every draft at the mode's first check makes each greedy cycle take a
    deepest path of the tree and commit it whole: the path choice asks the run's rules too."""
    from viasd_adapt.core.hooks import hookimpl

    class AcceptEverything:
        def __init__(self):
            self.committed, self.asked = [], 0

        def accept(self, tokens):
            self.asked += 1
            return torch.ones(tokens.shape[0])

        @hookimpl
        def viasd_cycle_finished(self, cycle, metrics):
            self.committed.append(len(cycle.tokens))

    setattr(AcceptEverything, hook, hookimpl(lambda self, tokens, **_: self.accept(tokens)))
    plugin = AcceptEverything()
    ids = _prompts(ea_model, 1)[0]
    # the tier on every cycle (the rules decide each one); lossy: u resolves every bonus
    settings = TierSettings(mode=mode, lenience=0.1, alpha1=0.1, alpha2=0.99, adaptive=False)
    with junk_drafter_warning("eagle", expected=mode == "lossy"):  # the plugin commits every draft gate 1 sees
        eagle.generate(ea_model, ids, 40,
                       context=viasd_adapt.context(ea_model, mask=MASK, settings=settings, plugins=[plugin]),
                       options=eagle.EagleOptions(lossless_strategy="cascade"))
    retrieve = ea_model.tree_buffers["retrieve_indices"]
    depth = int((retrieve >= 0).sum(-1).max()) - 1
    cycles = plugin.committed[1:-1]  # after the prefill; the last one may be cut by the budget
    assert len(cycles) >= 3 and cycles == [depth + after_path] * len(cycles)
    # asked to choose (about each path that could still win: at least one per tree, never one no longer
    # than the best run so far), then by the cycle's decision
    cycles_decided = len(plugin.committed) - 1
    assert 2 * cycles_decided <= plugin.asked < (retrieve.shape[0] + 1) * cycles_decided and retrieve.shape[0] > 1


# --------------------------------------------------------------------------- options


def test_options_are_typed_and_checked(ea_model):
    options = eagle.EagleOptions(head_features="full", lossless_strategy="cascade")
    assert options.head_features is eagle.HeadFeatures.FULL and options.lossless_strategy is eagle.LosslessStrategy.CASCADE
    with pytest.raises(ConfigError, match="head_features must be one of 'slim', 'full'"):
        eagle.EagleOptions(head_features="fast")
    with pytest.raises(ConfigError, match="lossless_strategy"):
        eagle.EagleOptions(lossless_strategy="tree")
    with pytest.raises(ConfigError, match="share_prefix"):
        eagle.EagleOptions(share_prefix="yes")
    with pytest.raises(ConfigError, match="options must be an EagleOptions"):
        eagle.generate(ea_model, _prompts(ea_model, 1)[0], 4, options="cascade")
    with pytest.raises(ConfigError, match="settings must be a TierSettings"):
        eagle.generate(ea_model, _prompts(ea_model, 1)[0], 4,
                       context=viasd_adapt.context(ea_model, settings={"mode": "lossy"}))
    assert not eagle.is_patched()


def test_full_head_features_cost_one_q_pass_per_cycle(ea_model):
    ids = _prompts(ea_model, 1)[0]
    # u resolves (nearly) every position itself; the tier on every cycle (the adaptive tier would verify
    # untiered here, where the tiny head's drafts do not pay for a slim pass)
    settings = TierSettings(mode="lossy", alpha1=0.5, alpha2=0.99, adaptive=False)
    with junk_drafter_warning("eagle"):  # the tiny head looks unrelated to the monitor, whichever features it reads
        slim = eagle.generate(ea_model, ids, 24, context=viasd_adapt.context(ea_model, mask=MASK, settings=settings))
    with junk_drafter_warning("eagle"):
        full = eagle.generate(ea_model, ids, 24,
                              context=viasd_adapt.context(ea_model,
                                                          mask=MASK,
                                                          settings=settings), options=eagle.EagleOptions(head_features="full"))
    assert full.metrics.full_passes == full.metrics.cycles  # the prefill, then one q pass every cycle
    assert slim.metrics.full_passes < slim.metrics.cycles


# --------------------------------------------------------------------------- EOS and the registry entry


class _Tokenizer:
    """Stands in for eagle's tokenizer; eagenerate only reads ``eos_token_id``."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id


def test_generation_past_eos_when_asked(ea_model):
    ids = _prompts(ea_model, 1)[0]
    greedy = eagle.generate(ea_model, ids, 20,
                            context=viasd_adapt.context(ea_model, settings=TierSettings(mode="none"))).tokens
    eos = greedy[4]
    saved = ea_model.tokenizer
    ea_model.tokenizer = _Tokenizer(eos)
    try:
        for mode in ("none", "lossless"):
            mask = MASK if mode == "lossless" else None
            stopped = eagle.generate(ea_model, ids, 20,
                                     context=viasd_adapt.context(ea_model, mask=mask, settings=TierSettings(mode=mode)))
            assert stopped.tokens == greedy[: greedy.index(eos) + 1]
            assert stopped.metrics.committed == len(stopped.tokens)
            full = eagle.generate(ea_model, ids, 20,
                                  context=viasd_adapt.context(ea_model,
                                                              mask=mask,
                                                              settings=TierSettings(mode=mode)), stop_at_eos=False)
            assert full.tokens == greedy  # greedy continues past EOS exactly as if it were any token
            assert full.metrics.committed == 20 and len(full.tiers) == 20
    finally:
        ea_model.tokenizer = saved


def _loaded_pair(tiny_eagle, ea_model):
    from viasd_adapt.models.pair import LoadedPair, MaskInfo

    with pytest.warns(DeprecationWarning, match=r"LoadedPair\(loaded=\.\.\.\) is deprecated"):  # the 0.2 hand-over, kept until 0.4.0
        return LoadedPair(target=ea_model.base_model, draft=None, tokenizer=ea_model.tokenizer,
                          mask=MaskInfo(MASK, "test mask", False), device=torch.device("cpu"),
                          target_path=str(tiny_eagle / "target"), eagle_head=str(tiny_eagle / "head"),
                          loaded={"eagle": ea_model})


def test_framework_registry_entry_reports_eagles_cache_sizes(tiny_eagle, ea_model):
    """The exact rows equal the target's greedy output: tests/conformance/test_greedy_identity.py."""
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest

    pair = _loaded_pair(tiny_eagle, ea_model)
    prompt = _prompts(ea_model, 1)[0][0].tolist()
    outputs = {}
    for mode in ("plain", "none", "lossy", "audit"):
        settings = TierSettings(mode="none" if mode == "plain" else mode, adaptive=False)  # lossy: the tier every cycle
        out = frameworks.run("eagle", pair, RunRequest(mode, prompt, 10, settings, stop_at_eos=False))
        assert len(out.tokens) == 10 and out.extra_bytes > 0
        assert (out.metrics is None) == (mode == "plain")
        outputs[mode] = out
    assert outputs["lossy"].extra_bytes > outputs["none"].extra_bytes  # the slim verifier's own cache
    assert outputs["lossy"].metrics.slim_passes > 0 and outputs["none"].metrics.slim_passes == 0
    assert outputs["audit"].tokens == outputs["lossy"].tokens
