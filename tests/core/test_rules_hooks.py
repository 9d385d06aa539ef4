"""The pluggy hook interface: built-in rules as a plugin, user overrides, observers, entry points.

(That observers see exactly the committed tokens, on every framework and in every mode, budget and
EOS cuts included, is tested in tests/conformance/test_modes.py.)"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
import torch

from tests.support import REPO_ROOT
from viasd_adapt.engine.drafters import ModelDrafter
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.core.hooks import (
    BUILTIN_PLUGIN_NAME,
    ENTRY_POINT_GROUP,
    forget_entry_point_plugins,
    hook_rules,
    hookimpl,
    make_plugin_manager,
)
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.core.rules import BUILTIN_RULES, BuiltinRules, TierRules
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier, escalate, route_block


SETTINGS = TierSettings(gamma=3, adaptive=False)  # the tier on every cycle: these tests watch its rules
RULE_HOOKS = ("viasd_gate1_accept_prob", "viasd_slim_confidence", "viasd_slim_resolves", "viasd_escalation_accept_prob",
              "viasd_lenient_accept_prob", "viasd_lossless_accept_prob")
TOKENS = torch.tensor([0, 1, 2])
P = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1]])
# u agrees with every draft (gate 1 passes everywhere) and is confident at the bonus position.
U = torch.tensor([[0.8, 0.1, 0.05, 0.05], [0.05, 0.8, 0.1, 0.05], [0.05, 0.05, 0.8, 0.1], [0.02, 0.02, 0.06, 0.9]])


class AlwaysReject:
    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        return torch.zeros(tokens.shape[0])


class NeverTrustSlim:
    """A router that always escalates."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def viasd_slim_resolves(self, confidence, settings):
        self.calls += 1
        return torch.zeros_like(confidence, dtype=torch.bool)


class Deferring:
    """Looks at every gate-1 call and answers none of them."""

    def __init__(self):
        self.seen = 0

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        self.seen += 1
        return None


# ============================================================================== registration


def test_builtin_rules_are_a_named_plugin():
    manager = make_plugin_manager(load_entrypoints=False)
    plugin = manager.get_plugin(BUILTIN_PLUGIN_NAME)
    assert BUILTIN_PLUGIN_NAME == "viasd-builtin-rules"
    assert isinstance(plugin, BuiltinRules)
    for hook in RULE_HOOKS:
        impls = getattr(manager.hook, hook).get_hookimpls()
        assert [impl.plugin for impl in impls] == [plugin]
        assert impls[0].trylast
    # Unregistering the built-ins leaves no answer at all: they really are the only source of rules.
    manager.unregister(plugin)
    assert manager.hook.viasd_slim_resolves(confidence=torch.tensor([0.9]), settings=SETTINGS) is None


def test_hook_rules_reproduce_builtin_decisions():
    rules = hook_rules(make_plugin_manager(load_entrypoints=False))
    # token 0 is q's argmax; token 1 has 0.3 of q's top 0.5 (within lenience 0.5); token 2 has 0.1 of 0.6
    q = torch.tensor([[0.5, 0.1, 0.1, 0.3], [0.1, 0.3, 0.1, 0.5], [0.1, 0.6, 0.1, 0.2], [0.25] * 4])
    for greedy in (True, False):
        for settings in (SETTINGS, SETTINGS.with_(greedy_gates="top")):
            torch.testing.assert_close(
                rules.viasd_gate1_accept_prob(tokens=TOKENS, p=P, u=U, settings=settings, greedy=greedy),
                BUILTIN_RULES.viasd_gate1_accept_prob(tokens=TOKENS, p=P, u=U, settings=settings, greedy=greedy),
            )
        lenient = rules.viasd_lenient_accept_prob(tokens=TOKENS, p=P, q=q, settings=SETTINGS, greedy=greedy)
        lossless = rules.viasd_lossless_accept_prob(tokens=TOKENS, proposer=P, verifier=q[:-1], greedy=greedy)
        if greedy:
            assert lenient.tolist() == [1.0, 1.0, 0.0] and lossless.tolist() == [1.0, 0.0, 0.0]
        else:  # min(1, q(x) / (0.5 p(x))) and min(1, q(x) / p(x)), with p(x) = 0.7
            torch.testing.assert_close(lenient, torch.tensor([1.0, 0.3 / 0.35, 0.1 / 0.35]))
            torch.testing.assert_close(lossless, torch.tensor([0.5 / 0.7, 0.3 / 0.7, 0.1 / 0.7]))
    confidence = rules.viasd_slim_confidence(p=P, u=U, settings=SETTINGS)
    torch.testing.assert_close(confidence, U.max(-1).values)
    assert rules.viasd_slim_resolves(confidence=confidence, settings=SETTINGS).tolist() == (U.max(-1).values >= 0.7).tolist()


def test_the_rules_interface_is_a_protocol_with_one_name_per_rule():
    """The built-in implementation's methods are the hook names themselves (no second name), and
    the hook specifications are the Protocol's methods."""
    assert TierRules._is_protocol
    assert set(RULE_HOOKS) == {name for name in vars(BuiltinRules) if not name.startswith("_")}
    for name in RULE_HOOKS:
        assert getattr(TierRules, name).viasd_adapt_spec["firstresult"]
        assert getattr(BuiltinRules, name).viasd_adapt_impl.get("specname") is None


def test_a_manager_without_the_rule_hooks_is_refused_by_name():
    import pluggy

    from viasd_adapt.errors import ConfigError

    with pytest.raises(ConfigError, match="viasd_gate1_accept_prob"):
        hook_rules(pluggy.PluginManager("viasd_adapt"))


# ============================================================================== overriding decisions


def test_gate1_override_changes_the_decision():
    builtin = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=hook_rules(make_plugin_manager(load_entrypoints=False)))
    assert builtin.n_accepted == 3 and builtin.slim_token == 3

    rules = hook_rules(make_plugin_manager([AlwaysReject()], load_entrypoints=False))
    overridden = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=rules)
    assert overridden.n_accepted == 0
    assert overridden.slim_token == 0  # u is confident at position 0 and its argmax is 0


def test_router_override_changes_the_decision():
    router = NeverTrustSlim()
    rules = hook_rules(make_plugin_manager([router], load_entrypoints=False))
    outcome = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=rules)
    assert router.calls == 1
    assert (outcome.n_accepted, outcome.slim_token, outcome.escalate_at) == (3, None, 3)


def test_escalation_override():
    class AcceptEverything:
        @hookimpl
        def viasd_escalation_accept_prob(self, tokens, p, q, settings, greedy):
            return torch.ones(tokens.shape[0])

    q = torch.full((4, 4), 0.25)
    q[:, 3] = 0.7
    q[:, :3] = 0.1
    builtin = escalate(TOKENS, P, q, 0, SETTINGS, True, rules=hook_rules(make_plugin_manager(load_entrypoints=False)))
    assert builtin.n_accepted == 0
    rules = hook_rules(make_plugin_manager([AcceptEverything()], load_entrypoints=False))
    assert escalate(TOKENS, P, q, 0, SETTINGS, True, rules=rules).n_accepted == 3


def test_plugin_returning_none_defers_to_builtin():
    deferring = Deferring()
    rules = hook_rules(make_plugin_manager([deferring], load_entrypoints=False))
    outcome = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=rules)
    assert deferring.seen == 1
    assert (outcome.n_accepted, outcome.slim_token) == (3, 3)  # the built-in answer


def test_lenient_and_lossless_overrides_decide_the_cycle():
    """decide_cycle asks the lenient and the lossless rule of the run's rules, like the others."""
    from viasd_adapt.core.cycle import CyclePolicy, Verifiers, decide_cycle

    class AcceptEverything:
        def __init__(self):
            self.calls = []

        @hookimpl
        def viasd_lenient_accept_prob(self, tokens, p, q, settings, greedy):
            self.calls.append("lenient")
            return torch.ones(tokens.shape[0])

        @hookimpl
        def viasd_lossless_accept_prob(self, tokens, proposer, verifier, greedy):
            self.calls.append("lossless")
            return torch.ones(tokens.shape[0])

    q = torch.full((6, 4), 0.1)
    q[:, 3] = 0.7  # q's (and here u's) argmax is token 3 everywhere: none of the drafts 0, 1, 2
    verifiers = Verifiers(full=lambda tokens: q[: tokens.shape[0] + 1], slim=lambda tokens: q[: tokens.shape[0] + 1])
    cases = (("lenient", ["lenient"], [3], [0, 1, 2, 3]), ("none", ["lossless"], [3], [0, 1, 2, 3]),
             # the cascade: u's check, then q's (of u's correction, or of the drafts plus u's bonus)
             ("lossless", ["lossless", "lossless"], [3, 3], [0, 1, 2, 3, 3]))
    for mode, asked, by_builtin, by_plugin in cases:
        settings = TierSettings(mode=mode, gamma=3, lenience=0.1)
        builtin = decide_cycle(TOKENS, P, verifiers, CyclePolicy(settings, True, hook_rules(make_plugin_manager(load_entrypoints=False))))
        assert builtin.result.tokens == by_builtin  # the first draft is rejected
        plugin = AcceptEverything()
        rules = hook_rules(make_plugin_manager([plugin], load_entrypoints=False))
        overridden = decide_cycle(TOKENS, P, verifiers, CyclePolicy(settings, True, rules))
        assert overridden.result.tokens == by_plugin and plugin.calls == asked


# ============================================================================== in the engine


@pytest.fixture(scope="module")
def sharp_target():
    """A tiny Llama whose LM head is scaled up, so distributions are peaked like a trained model's."""
    target = tiny_model("llama", seed=0, num_layers=6)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(30.0)
    return target


def generate(target, plugins, mode="lossy", max_new_tokens=30, eos=(), sampling=SamplingConfig(), seed=None):
    """The engine with the tier on every cycle (``adaptive=False``): the rules decide every cycle."""
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(6, [2, 3, 4])).model, sampling)
    verifier = tiered_verifier(
        target, TierSettings(mode=mode, gamma=4, adaptive=False), sampling, slim=SlimVerifier(target, RoutingMask.from_skipped(6, [3, 4])),
        plugin_manager=make_plugin_manager(plugins, load_entrypoints=False),
    )
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return speculative_generate(drafter, verifier, [5, 17, 33, 2, 9], max_new_tokens, eos, generator=gen)


def test_overrides_change_generation(sharp_target):
    baseline = generate(sharp_target, [])
    assert baseline.metrics.draft_tokens > 0 and baseline.metrics.slim_tokens > 0

    rejecting = generate(sharp_target, [AlwaysReject()])
    assert rejecting.metrics.draft_tokens == 0  # no draft survives gate 1 ...
    assert set(rejecting.tiers) == {int(Tier.SLIM), int(Tier.FULL)}  # ... so u or q decides every token
    assert rejecting.metrics.rejection_rate > baseline.metrics.rejection_rate

    escalating = generate(sharp_target, [NeverTrustSlim()])
    assert escalating.metrics.slim_tokens == 0
    assert escalating.metrics.full_passes > baseline.metrics.full_passes


def test_example_plugin_runs_and_its_observer_matches_metrics(capsys):
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        import plugin_example
    finally:
        sys.path.pop(0)
    seen = plugin_example.run_example(max_new_tokens=32, verbose=True)
    printed = capsys.readouterr().out
    assert "tiers seen by the observer" in printed
    metrics = seen["output"].metrics
    assert seen["counts"] == {
        name: count
        for name, count in (("DRAFT", metrics.draft_tokens), ("SLIM", metrics.slim_tokens), ("FULL", metrics.full_tokens))
        if count
    }
    assert sum(seen["counts"].values()) == len(seen["output"].tokens) == 32
    # The entropy router is really in charge: a threshold above 1 makes the slim tier silent.
    silent = plugin_example.run_example(max_new_tokens=32, threshold=1.01, verbose=False)
    assert "SLIM" not in silent["counts"]
    assert "SLIM" in seen["counts"]


# ============================================================================== entry points


class _FakeDistribution:
    def __init__(self, entry_points):
        self.entry_points = entry_points
        self.metadata = {"name": "viasd-fake-plugin"}


def test_third_party_plugins_load_from_the_entry_point_group(tmp_path, monkeypatch):
    module = tmp_path / "viasd_fake_plugin_mod.py"
    module.write_text(
        textwrap.dedent(
            """
            import torch
            from viasd_adapt.core.hooks import hookimpl

            @hookimpl
            def viasd_slim_resolves(confidence, settings):
                return torch.zeros_like(confidence, dtype=torch.bool)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ours = importlib.metadata.EntryPoint("fake_router", "viasd_fake_plugin_mod", ENTRY_POINT_GROUP)
    other = importlib.metadata.EntryPoint("not_ours", "viasd_fake_plugin_mod", "some_other_group")
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_FakeDistribution([ours, other])])

    forget_entry_point_plugins()  # the group as it is installed now
    try:
        manager = make_plugin_manager()
        assert manager.has_plugin("fake_router") and not manager.has_plugin("not_ours")
        outcome = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=hook_rules(manager))
        assert outcome.escalate_at == 3  # the loaded plugin overrode the router
        assert not make_plugin_manager(load_entrypoints=False).has_plugin("fake_router")
    finally:
        forget_entry_point_plugins()  # later tests in this worker do not meet the fake plugin


def test_the_entry_point_group_is_read_once_per_process(monkeypatch):
    """A plugin manager per run (and per tuning candidate) does not scan the installed
    distributions each time; control: after ``forget_entry_point_plugins`` the next one does."""
    reads = []
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: reads.append(1) or [])
    forget_entry_point_plugins()
    try:
        for _ in range(3):
            make_plugin_manager()
        assert len(reads) == 1
        forget_entry_point_plugins()
        make_plugin_manager()
        assert len(reads) == 2
    finally:
        forget_entry_point_plugins()
