"""One runtime: every framework verifies through one VerifyStep, the ledger is the one writer of
metrics, and the rules interface is declared once.

The structural checks read the library's source with :mod:`ast`; each has a control that feeds the
checker a snippet breaking the rule, so a checker that finds nothing cannot pass by accident.
"""

from __future__ import annotations

import ast
import dataclasses
import threading
import warnings
from pathlib import Path

import pytest
import torch

from tests.support import REPO_ROOT
from viasd_adapt.core.cycle import Verifiers
from viasd_adapt.core.hooks import hookimpl, make_plugin_manager
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.monitor import MONITOR_PLUGIN_NAME
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier
from viasd_adapt.core.verify_step import VerifyStep

LIBRARY = [REPO_ROOT / "viasd_adapt", REPO_ROOT / "adapters"]
RULE_NAMES = ("gate1_accept_prob", "slim_confidence", "slim_resolves", "escalation_accept_prob", "lenient_accept_prob",
              "lossless_accept_prob")
METRIC_FIELDS = {f.name for f in dataclasses.fields(TierMetrics)}
METRIC_RECORDERS = {"record_cycle", "record_audit", "trim_to"}


def library_sources() -> dict[str, str]:
    files = sorted(p for root in LIBRARY for p in root.rglob("*.py"))
    assert len(files) > 50  # the walk found the library
    return {str(p.relative_to(REPO_ROOT)): p.read_text() for p in files}


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _names_metrics(node: ast.AST) -> bool:
    """Whether an expression is (an attribute path ending in) something called ``metrics``."""
    text = _text(node)
    return text == "metrics" or text.endswith(".metrics") or text.endswith("_metrics")


# ============================================================================== one writer of metrics


def metric_writes(source: str) -> list[str]:
    """Every statement in ``source`` that writes a TierMetrics field or builds one with values."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in METRIC_FIELDS and _names_metrics(target.value):
                found.append(_text(node))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "TierMetrics" and (node.args or node.keywords):
                found.append(_text(node))
            if isinstance(func, ast.Attribute) and func.attr in METRIC_RECORDERS:
                found.append(_text(node))
            # a metrics list mutated in place: metrics.token_tiers.append(...)
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)
                    and func.value.attr in METRIC_FIELDS and _names_metrics(func.value.value)):
                found.append(_text(node))
    return found


def test_the_metric_write_finder_finds_writes():
    snippet = (
        "self.metrics.draft_passes += 3\n"
        "metrics.full_passes = 1\n"
        "m = TierMetrics(cycles=2)\n"
        "call_metrics.trim_to(4)\n"
        "metrics.token_tiers.append(3)\n"
        "fine = TierMetrics()\n"
        "other.draft_passes = 1\n"
    )
    assert len(metric_writes(snippet)) == 5


def test_only_the_ledger_writes_metrics():
    writers = {path: writes for path, source in library_sources().items()
               if path not in ("viasd_adapt/core/metrics.py", "viasd_adapt/core/ledger.py") and (writes := metric_writes(source))}
    assert writers == {}, "TierMetrics is written outside viasd_adapt/core/ledger.py"


# ============================================================================== one rules interface


def rule_classes(source: str) -> dict[str, set[str]]:
    """Class name -> the rule names it defines a method for (bare or with the ``viasd_`` prefix)."""
    classes = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            methods = {item.name.removeprefix("viasd_") for item in node.body if isinstance(item, ast.FunctionDef)}
            if methods & set(RULE_NAMES):
                classes[node.name] = methods & set(RULE_NAMES)
    return classes


def test_the_rule_class_finder_finds_a_restated_interface():
    snippet = "class Wrapper:\n" + "".join(f"    def {name}(self, *a):\n        pass\n" for name in RULE_NAMES)
    assert rule_classes(snippet) == {"Wrapper": set(RULE_NAMES)}


def test_the_rules_interface_is_declared_once():
    """The Protocol declares it (its methods are the hook specifications); the built-in rules
    implement it, once; nothing else in the library restates it (plugins answering some of the
    hooks are fine)."""
    whole = {}
    for path, source in library_sources().items():
        for name, rules in rule_classes(source).items():
            if rules == set(RULE_NAMES):
                whole[f"{path}:{name}"] = rules
    assert sorted(whole) == ["viasd_adapt/core/rules.py:BuiltinRules", "viasd_adapt/core/rules.py:TierRules"]


# ============================================================================== one verify step


def calls_to(source: str, function: str) -> int:
    return sum(1 for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
               and _text(node.func).split(".")[-1] == function)


@pytest.mark.parametrize("function, allowed", [
    ("decide_cycle", {"viasd_adapt/core/verify_step.py"}),  # every framework decides through VerifyStep
    ("CycleLedger", {"viasd_adapt/core/verify_step.py", "viasd_adapt/core/ledger.py"}),  # and counts through its ledger
    ("verify_block", {"viasd_adapt/core/cycle.py", "viasd_adapt/core/tiers.py"}),  # no adapter verifies a block itself
    ("DrafterQualityMonitor", {"viasd_adapt/core/verify_step.py"}),  # the monitor is the verify step's, everywhere
])
def test_the_verify_step_is_the_one_way_in(function, allowed):
    callers = {path for path, source in library_sources().items() if calls_to(source, function)}
    assert callers == allowed


def test_the_call_finder_counts_calls():
    assert calls_to("x = decide_cycle(a)\ny = cycle.decide_cycle(b)\ndecide_cycle_too(c)", "decide_cycle") == 2


# ============================================================================== VerifyStep itself

G, V = 3, 6


def _block(agree: bool) -> tuple[torch.Tensor, torch.Tensor, Verifiers]:
    """Greedy drafts that gate 1 passes; ``agree``: they are also u's argmax (a sound drafter)."""
    drafts = torch.tensor([1, 2, 3])
    p = torch.full((G, V), 0.01)
    p[torch.arange(G), drafts] = 0.95
    u = torch.full((G + 1, V), 0.02)
    if agree:
        u[torch.arange(G), drafts] = 0.9
    else:  # u prefers token 0 everywhere, and still gives the draft enough mass for a lenient gate
        u[:, 0] = 0.6
        u[torch.arange(G), drafts] = 0.3
    u[G, 4] = 0.9
    u = u / u.sum(-1, keepdim=True)
    return drafts, p, Verifiers(full=lambda tokens: torch.full((tokens.shape[0] + 1, V), 1.0 / V), slim=lambda tokens: u)


# the tier on every cycle: these tests read what one lossy decision does (the adaptive arm is tests/core/test_adaptive_step.py's)
LOSSY = TierSettings(mode="lossy", alpha1=0.9, alpha2=0.2, adaptive=False)


def test_verify_decides_and_records_one_cycle():
    seen = []

    class Observer:
        @hookimpl
        def viasd_token_decided(self, event):
            seen.append((event.token, event.tier))

    step = VerifyStep(LOSSY, "test", plugins=(Observer(),))
    drafts, p, verifiers = _block(agree=True)
    outcome = step.verify(drafts, p, verifiers, draft_ids=[1, 2, 3])
    assert outcome.result.tokens == [1, 2, 3, 4]  # gate 1 passes all three, u resolves the bonus
    assert step.metrics.token_tiers == [int(Tier.DRAFT)] * 3 + [int(Tier.SLIM)]
    assert (step.metrics.slim_passes, step.metrics.full_passes, step.metrics.drafted) == (1, 0, 3)
    assert seen == [(1, 1), (2, 1), (3, 1), (4, 2)]
    fresh = step.new_generation()
    assert fresh is step.metrics and fresh.committed == 0 and outcome.result.tokens == [1, 2, 3, 4]


def test_monitor_evidence_stays_with_its_own_step_on_a_shared_manager():
    """Two runs, one plugin manager, two threads: each monitor sees only its own gate-1 calls."""
    manager = make_plugin_manager(load_entrypoints=False)
    steps = {agree: VerifyStep(LOSSY, "test", manager) for agree in (True, False)}
    barrier = threading.Barrier(2)

    def run(agree: bool) -> None:
        drafts, p, verifiers = _block(agree)
        for _ in range(5):
            barrier.wait()
            steps[agree].verify(drafts, p, verifiers)

    threads = [threading.Thread(target=run, args=(agree,)) for agree in steps]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the disagreeing drafter is junk, and is told so
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert steps[True].monitor.evidence.committed == 15 and steps[True].monitor.evidence.agreement == 1.0
    assert steps[False].monitor.evidence.committed == 15 and steps[False].monitor.evidence.agreement == 0.0


def test_every_run_leaves_the_plugin_manager_as_given_and_a_lossy_one_monitors_in_its_own():
    class Counter:
        seen = 0

        @hookimpl
        def viasd_cycle_finished(self, cycle, metrics):
            Counter.seen += 1

    manager = make_plugin_manager([Counter()], load_entrypoints=False)
    manager.set_blocked("blocked-by-the-caller")
    before = manager.list_name_plugin()
    for mode in ("none", "lenient", "lossless", "audit"):
        VerifyStep(TierSettings(mode=mode), "test", manager)
    steps = [VerifyStep(LOSSY, "test", manager), VerifyStep(LOSSY, "test", manager)]
    assert all(step.plugin_manager is manager for step in steps)  # the step names the manager it was given
    assert manager.list_name_plugin() == before  # the caller's manager: never a monitor
    own = [step.observer.manager for step in steps]
    for hooks in own:  # control: each lossy run's own manager has its monitor and the caller's plugins
        names = [name for name, _ in hooks.list_name_plugin()]
        assert names.count(MONITOR_PLUGIN_NAME) == 1 and names[:len(before)] == [name for name, _ in before]
        assert hooks.is_blocked("blocked-by-the-caller")
    assert own[0] is not own[1]
    drafts, p, verifiers = _block(agree=True)
    steps[0].verify(drafts, p, verifiers)
    assert Counter.seen == 1  # the caller's observer still observes the run


def test_a_junk_drafter_warns_through_the_monitor_plugin():
    from viasd_adapt.core.monitor import ViasdQualityWarning

    step = VerifyStep(LOSSY, "test", plugins=())
    drafts, p, verifiers = _block(agree=False)
    with pytest.warns(ViasdQualityWarning, match=r"\(test\)") as caught:
        for _ in range(5):
            step.verify(drafts, p, verifiers)
    # it names the caller's line, not the plugin or pluggy's machinery that noticed
    assert [w.filename for w in caught if issubclass(w.category, ViasdQualityWarning)] == [__file__]


def test_set_greedy_tells_the_policy_and_the_monitor_and_keeps_the_generation():
    step = VerifyStep(LOSSY, "test", greedy=True)
    drafts, p, verifiers = _block(agree=True)
    step.verify(drafts, p, verifiers)
    metrics, evidence = step.metrics, step.monitor.evidence
    step.set_greedy(False)
    assert (step.greedy, step.policy.greedy, step.monitor.greedy) == (False, False, False)
    assert step.metrics is metrics and step.monitor.evidence is evidence and evidence.committed == 3
    assert step.new_generation().committed == 0 and step.monitor.greedy is False  # the next one starts as told


def test_record_counts_the_passes_a_framework_measured():
    from viasd_adapt.core.verify_step import MeasuredPasses

    step = VerifyStep(LOSSY, "test")
    drafts, p, verifiers = _block(agree=True)
    outcome = step.decide(drafts, p, verifiers)
    assert (outcome.slim_passes, outcome.full_passes) == (1, 0)  # the verifier calls the decision made
    step.record(outcome, drafted=3, measured=MeasuredPasses(slim=1, full=2))
    assert (step.metrics.slim_passes, step.metrics.full_passes) == (1, 2)
    assert (outcome.slim_passes, outcome.full_passes) == (1, 0)  # the decision itself is left as decided
    step.record(step.decide(drafts, p, verifiers), drafted=3)  # nothing measured: the decision's calls
    assert (step.metrics.slim_passes, step.metrics.full_passes) == (2, 2)


def test_bad_settings_are_refused_when_the_step_is_built():
    from viasd_adapt.errors import ConfigError

    with pytest.raises(ConfigError, match="settings must be a TierSettings, got dict"):
        VerifyStep({"mode": "lossy"}, "test")


def test_the_library_walk_sees_the_verify_step():
    assert "viasd_adapt/core/verify_step.py" in library_sources()
    assert Path(REPO_ROOT / "viasd_adapt" / "core" / "verify_step.py").is_file()


# ============================================================================== u as a proposer only


def _extension_policy(greedy: bool):
    from viasd_adapt.core.cycle import CyclePolicy

    return CyclePolicy(TierSettings(mode="lossless"), greedy, slim_extends_only=True)


def test_extension_keeps_every_draft_for_q_and_adds_u_token():
    from viasd_adapt.core.cycle import decide_cycle

    drafts = torch.tensor([1, 2])
    p = torch.full((2, V), 1.0 / V)
    u = torch.full((3, V), 0.02)
    u[0, 0] = u[1, 0] = 0.9  # u disagrees with both drafts: the ordinary cascade would cut them
    u[2, 5] = 0.9
    u = u / u.sum(-1, keepdim=True)

    def q_rows(favourite: list[int]):
        rows = torch.full((len(favourite), V), 0.02)
        rows[torch.arange(len(favourite)), torch.tensor(favourite)] = 0.9
        return lambda tokens: (rows / rows.sum(-1, keepdim=True))[: tokens.shape[0] + 1]

    agreeing = Verifiers(full=q_rows([1, 2, 5, 3]), slim=lambda tokens: u)
    outcome = decide_cycle(drafts, p, agreeing, _extension_policy(True))
    assert outcome.result.tokens == [1, 2, 5, 3]
    assert outcome.result.tiers == [Tier.DRAFT, Tier.DRAFT, Tier.SLIM, Tier.FULL]
    assert (outcome.slim_passes, outcome.full_passes) == (1, 1)
    rejecting = Verifiers(full=q_rows([1, 4, 5, 3]), slim=lambda tokens: u)
    outcome = decide_cycle(drafts, p, rejecting, _extension_policy(True))
    assert outcome.result.tokens == [1, 4] and outcome.result.tiers == [Tier.DRAFT, Tier.FULL]


def test_extension_is_exact_when_sampling():
    """The first committed token of a one-draft block, over many seeds, is distributed as q."""
    from tests.support.stats import samples_pvalue
    from viasd_adapt.core.cycle import decide_cycle

    generator = torch.Generator().manual_seed(7)
    p = torch.tensor([[0.5, 0.2, 0.1, 0.1, 0.05, 0.05]])
    u = torch.tensor([[0.1, 0.1, 0.4, 0.2, 0.1, 0.1], [0.3, 0.1, 0.1, 0.1, 0.2, 0.2]])
    q = torch.tensor([[0.05, 0.3, 0.3, 0.1, 0.15, 0.1]] * 3)
    verifiers = Verifiers(full=lambda tokens: q[: tokens.shape[0] + 1], slim=lambda tokens: u)
    firsts = []
    for _ in range(3000):
        draft = torch.multinomial(p[0], 1, generator=generator)
        firsts.append(decide_cycle(draft, p, verifiers, _extension_policy(False), generator).result.tokens[0])
    assert samples_pvalue(firsts, q[0].numpy()) > 1e-3
    # the control: the same draws scored against p are rejected, so the test can tell
    assert samples_pvalue(firsts, p[0].numpy()) < 1e-6
