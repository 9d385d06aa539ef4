"""A rule plugin is obeyed wherever a rule is asked: the audit's effective distributions, EAGLE's
path choice and decision, and the vLLM plugin's lenient transform (which finds it as a third-party
plugin does, through the ``viasd_adapt`` entry-point group). Each test has its control: the same
run without the plugin decides otherwise."""

from __future__ import annotations

import textwrap

import pytest
import torch

import viasd_adapt
from tests.core.test_tiers import P0, Q0, SIGNIFICANCE, U_UNSURE, fits, rows
from viasd_adapt.core.hooks import forget_entry_point_plugins
from viasd_adapt.core.cycle import CyclePolicy, Verifiers, decide_cycle
from viasd_adapt.core.hooks import hook_rules, hookimpl, make_plugin_manager
from viasd_adapt.core.rules import BUILTIN_RULES
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import effective_distribution, escalate, join_cycle, route_block


class CoinGate:
    """Gate 1 accepts every draft with probability 1/2 when sampling, whatever p and u say."""

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        return None if greedy else torch.full((tokens.shape[0],), 0.5)


def _rules(*plugins):
    return hook_rules(make_plugin_manager(plugins, load_entrypoints=False))


# ----------------------------------------------------------------------------- the audit


def committed_at_zero(tokens, p, u, q, settings, gen, rules):
    route = route_block(tokens, p, u, settings, False, gen, rules)
    escalation = None if route.escalate_at is None else escalate(tokens, p, q, route.escalate_at, settings, False, gen, rules)
    return join_cycle(tokens, route, escalation)


def test_the_audit_scores_the_distribution_a_plugins_gate_commits():
    settings = TierSettings(mode="audit", alpha1=0.5, alpha2=0.3, gamma=1, adaptive=False)
    p, u, q = rows(P0), rows(U_UNSURE, [0.25] * 4), rows(Q0, [0.25] * 4)  # u unsure: q commits what gate 1 rejects
    rules = _rules(CoinGate())
    gen = torch.Generator().manual_seed(11)
    samples = []
    for _ in range(6000):
        x = torch.multinomial(p[0], 1, generator=gen)
        result = committed_at_zero(x, p, u, q, settings, gen, rules)
        samples.append(result.tokens[0])
    with_plugin = effective_distribution(p[0], u[0], q[0], settings, slim_resolves=False, rules=rules)
    builtin = effective_distribution(p[0], u[0], q[0], settings, slim_resolves=False)
    assert fits(samples, with_plugin) > SIGNIFICANCE
    assert fits(samples, builtin) < SIGNIFICANCE  # control: the built-in rule's distribution is not this run's

    # the audit mode's record asks the same rules: its TV is the plugin's distribution against q
    outcome = decide_cycle(torch.tensor([0]), p, Verifiers(full=lambda t: q[: t.shape[0] + 1], slim=lambda t: u[: t.shape[0] + 1]),
                           CyclePolicy(settings, greedy=False, rules=rules), torch.Generator().manual_seed(0))
    assert outcome.audit.tv[0] == pytest.approx(0.5 * float((with_plugin - q[0]).abs().sum()), abs=1e-6)
    assert outcome.audit.tv[0] != pytest.approx(0.5 * float((builtin - q[0]).abs().sum()), abs=1e-3)


def test_the_audit_of_the_built_in_rules_is_unchanged_through_the_hooks():
    """The built-in rules asked through a plugin manager give the built-in distribution."""
    settings = TierSettings(mode="audit", alpha1=0.5, alpha2=0.3, gamma=1)
    p, u, q = rows(P0)[0], rows(U_UNSURE)[0], rows(Q0)[0]
    torch.testing.assert_close(effective_distribution(p, u, q, settings, False, rules=_rules()),
                               effective_distribution(p, u, q, settings, False, rules=BUILTIN_RULES))


# ----------------------------------------------------------------------------- EAGLE


class CycleLengths:
    """Observer: how many tokens each cycle committed."""

    def __init__(self):
        self.committed = []

    @hookimpl
    def viasd_cycle_finished(self, cycle, metrics):
        self.committed.append(len(cycle.tokens))


class AcceptEveryLenientDraft(CycleLengths):
    @hookimpl
    def viasd_lenient_accept_prob(self, tokens, p, q, settings, greedy):
        return torch.ones(tokens.shape[0])


def test_eagle_chooses_and_decides_by_the_plugins_lenient_rule(ea_model):
    from tests.support.eagle import MASK, prompts
    from viasd_adapt.adapters import eagle

    settings = TierSettings(mode="lenient", lenience=0.0, adaptive=False)  # lenience 0: the built-in rule is mode none
    ids = prompts(ea_model, 1)[0]
    runs = {}
    for name, plugin in (("plugin", AcceptEveryLenientDraft()), ("control", CycleLengths())):
        eagle.generate(ea_model, ids, 40,
                       context=viasd_adapt.context(ea_model, mask=MASK, settings=settings, plugins=[plugin]))
        runs[name] = plugin.committed[1:-1]  # after the prefill; the last one may be cut by the budget
    retrieve = ea_model.tree_buffers["retrieve_indices"]  # eagle sets its tree up on the first run
    depth = int((retrieve >= 0).sum(-1).max()) - 1
    assert len(runs["plugin"]) >= 3 and runs["plugin"] == [depth + 1] * len(runs["plugin"])  # a deepest path and q's bonus
    assert runs["control"] != [depth + 1] * len(runs["control"])  # without the plugin: lossless SD on a tiny head


# ----------------------------------------------------------------------------- the vLLM plugin


def _install_entry_point_plugin(root, monkeypatch) -> None:
    """A third-party package on ``sys.path`` whose ``viasd_adapt`` entry point is a module of hooks."""
    (root / "lenient_everything.py").write_text(textwrap.dedent("""
        import torch
        from viasd_adapt.core.hooks import hookimpl

        @hookimpl
        def viasd_lenient_accept_prob(tokens, p, q, settings, greedy):
            return torch.ones(tokens.shape[0])
    """))
    info = root / "lenient_everything-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lenient-everything\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[viasd_adapt]\nlenient_everything = lenient_everything\n")
    monkeypatch.syspath_prepend(str(root))
    forget_entry_point_plugins()  # the group is read once per process: read it again, with the package


def test_the_vllm_plugin_serves_an_entry_point_plugins_lenient_rule(tmp_path, monkeypatch):
    from tests.serving.test_vllm_plugin import _accepted, _engine, _step
    from tests.support.tuned import write_shipped_tuned_as

    demo_tuned = write_shipped_tuned_as("demo", tmp_path / "demo-lenient", "lenient")  # the lenient rule is served
    request = {"viasd": {"tuned": str(demo_tuned), "lenience": 0.01}}
    stock_rules = _engine(request)  # control: built before the plugin is installed
    _install_entry_point_plugin(tmp_path, monkeypatch)
    try:
        with_plugin = _engine(request)
    finally:
        forget_entry_point_plugins()  # later tests in this worker do not meet the package
    drafted = plugin_accepted = stock_accepted = 0
    for seed in range(10):
        meta, logits, sampling = _step(seed)
        drafted += sum(meta.num_draft_tokens)
        plugin_accepted += _accepted(with_plugin(meta, None, logits.clone(), sampling))
        stock_accepted += _accepted(stock_rules(meta, None, logits.clone(), sampling))
    assert plugin_accepted == drafted  # every draft committed, as the plugin's rule says
    assert stock_accepted < drafted / 2  # the built-in rule at lenience 0.01 keeps about the argmax drafts only

