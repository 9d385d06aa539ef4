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
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.core.hooks import (
    BUILTIN_PLUGIN_NAME,
    ENTRY_POINT_GROUP,
    BuiltinRulesPlugin,
    HookRules,
    hookimpl,
    make_plugin_manager,
)
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.core.rules import BUILTIN_RULES
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier, escalate, route_block

torch.set_num_threads(1)

SETTINGS = TierSettings(gamma=3)
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
    assert isinstance(plugin, BuiltinRulesPlugin)
    for hook in ("viasd_gate1_accept_prob", "viasd_slim_confidence", "viasd_slim_resolves", "viasd_escalation_accept_prob"):
        impls = getattr(manager.hook, hook).get_hookimpls()
        assert [impl.plugin for impl in impls] == [plugin]
        assert impls[0].trylast
    # Unregistering the built-ins leaves no answer at all: they really are the only source of rules.
    manager.unregister(plugin)
    assert manager.hook.viasd_slim_resolves(confidence=torch.tensor([0.9]), settings=SETTINGS) is None


def test_hook_rules_reproduce_builtin_decisions():
    rules = HookRules(make_plugin_manager(load_entrypoints=False))
    for greedy in (True, False):
        torch.testing.assert_close(
            rules.gate1_accept_prob(TOKENS, P, U, SETTINGS, greedy), BUILTIN_RULES.gate1_accept_prob(TOKENS, P, U, SETTINGS, greedy)
        )
    confidence = rules.slim_confidence(P, U, SETTINGS)
    torch.testing.assert_close(confidence, U.max(-1).values)
    assert rules.slim_resolves(confidence, SETTINGS).tolist() == (U.max(-1).values >= 0.7).tolist()


# ============================================================================== overriding decisions


def test_gate1_override_changes_the_decision():
    builtin = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=HookRules(make_plugin_manager(load_entrypoints=False)))
    assert builtin.n_accepted == 3 and builtin.slim_token == 3

    rules = HookRules(make_plugin_manager([AlwaysReject()], load_entrypoints=False))
    overridden = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=rules)
    assert overridden.n_accepted == 0
    assert overridden.slim_token == 0  # u is confident at position 0 and its argmax is 0


def test_router_override_changes_the_decision():
    router = NeverTrustSlim()
    rules = HookRules(make_plugin_manager([router], load_entrypoints=False))
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
    builtin = escalate(TOKENS, P, q, 0, SETTINGS, True, rules=HookRules(make_plugin_manager(load_entrypoints=False)))
    assert builtin.n_accepted == 0
    rules = HookRules(make_plugin_manager([AcceptEverything()], load_entrypoints=False))
    assert escalate(TOKENS, P, q, 0, SETTINGS, True, rules=rules).n_accepted == 3


def test_plugin_returning_none_defers_to_builtin():
    deferring = Deferring()
    rules = HookRules(make_plugin_manager([deferring], load_entrypoints=False))
    outcome = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=rules)
    assert deferring.seen == 1
    assert (outcome.n_accepted, outcome.slim_token) == (3, 3)  # the built-in answer


# ============================================================================== in the engine


@pytest.fixture(scope="module")
def sharp_target():
    """A tiny Llama whose LM head is scaled up, so distributions are peaked like a trained model's."""
    target = tiny_model("llama", seed=0, num_layers=6)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(30.0)
    return target


def generate(target, plugins, mode="lossy", max_new_tokens=30, eos=(), sampling=SamplingConfig(), seed=None):
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(6, [2, 3, 4])).model, sampling)
    verifier = TieredVerifier(
        target, TierSettings(mode=mode, gamma=4), sampling, slim=SlimVerifier(target, RoutingMask.from_skipped(6, [3, 4])),
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

    manager = make_plugin_manager()
    assert manager.has_plugin("fake_router") and not manager.has_plugin("not_ours")
    outcome = route_block(TOKENS, P, U, SETTINGS, greedy=True, rules=HookRules(manager))
    assert outcome.escalate_at == 3  # the loaded plugin overrode the router

    assert not make_plugin_manager(load_entrypoints=False).has_plugin("fake_router")
