"""The pluggy hook interface: every gate, rule and threshold of the tier is replaceable.

Rule hooks are ``firstresult``: the first plugin that returns something other than ``None`` wins.
The built-in VIA-SD rules are registered as an ordinary plugin marked ``trylast``, so any plugin a
user registers runs before them and may either answer or return ``None`` to defer. Observer hooks
(``viasd_token_decided``, ``viasd_cycle_finished``) are called on every plugin.

Third-party plugins are found through the ``viasd_adapt`` entry-point group::

    [project.entry-points.viasd_adapt]
    my_router = "my_package.my_module"
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import partial
from typing import Any, Iterable

import pluggy
import torch

from viasd_adapt.core.markers import PROJECT_NAME, hookimpl, hookspec  # noqa: F401  (hookimpl: for plugin authors)
from viasd_adapt.core.rules import BuiltinRules
from viasd_adapt.core.settings import TierSettings

ENTRY_POINT_GROUP = "viasd_adapt"


@dataclass(frozen=True)
class TokenEvent:
    """One committed token, as observers see it."""

    index: int  # position in the generated text (0 = first new token)
    token: int
    tier: int  # viasd_adapt.core.tiers.Tier value
    framework: str
    mode: str


class ViasdHookSpec:
    """Hook specifications. Tensors follow the shapes of :mod:`viasd_adapt.core.tiers`."""

    @hookspec(firstresult=True)
    def viasd_gate1_accept_prob(
        self, tokens: torch.Tensor, p: torch.Tensor, u: torch.Tensor, settings: TierSettings, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per draft position, that gate 1 (p -> u) accepts the draft token.

        Greedy callers treat the value as a 0/1 decision (> 0.5 passes).
        """

    @hookspec(firstresult=True)
    def viasd_slim_confidence(
        self, p: torch.Tensor, u: torch.Tensor, settings: TierSettings
    ) -> torch.Tensor | None:
        """The router's confidence score at each of the ``g + 1`` positions (the last: bonus)."""

    @hookspec(firstresult=True)
    def viasd_slim_resolves(self, confidence: torch.Tensor, settings: TierSettings) -> torch.Tensor | None:
        """Bool per position: may the slim verifier commit its own token there (tier 2)?"""

    @hookspec(firstresult=True)
    def viasd_escalation_accept_prob(
        self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, settings: TierSettings, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per escalated position, that the full verifier accepts the draft token."""

    @hookspec
    def viasd_token_decided(self, event: TokenEvent) -> None:
        """Observe every committed token and its tier."""

    @hookspec
    def viasd_cycle_finished(self, cycle: Any, metrics: Any) -> None:
        """Observe each draft-verify cycle (a :class:`~viasd_adapt.core.tiers.CycleResult`) and the
        running :class:`~viasd_adapt.core.metrics.TierMetrics`."""


#: The built-in rules are registered as they are: :class:`~viasd_adapt.core.rules.BuiltinRules` marks
#: each of its methods as the ``trylast`` implementation of one rule hook. (The old name stays.)
BuiltinRulesPlugin = BuiltinRules


def _rule_hooks() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """``(rule name, hook name, parameters)`` of every rule hook.

    Read off the two places that define them, so nothing here repeats the interface: the hook
    names and parameters from :class:`ViasdHookSpec`, the short names the decision functions call
    from the markers on :class:`~viasd_adapt.core.rules.BuiltinRules`.
    """
    found = []
    for name, method in vars(BuiltinRules).items():
        opts = getattr(method, f"{PROJECT_NAME}_impl", None)
        if opts is None:
            continue
        hook = opts.get("specname") or name
        parameters = tuple(inspect.signature(getattr(ViasdHookSpec, hook)).parameters)[1:]  # without self
        found.append((name, hook, parameters))
    return tuple(found)


RULE_HOOKS = _rule_hooks()


BUILTIN_PLUGIN_NAME = "viasd-builtin-rules"


def make_plugin_manager(plugins: Iterable[object] = (), load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A plugin manager with the built-in rules, entry-point plugins, then ``plugins``."""
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(ViasdHookSpec)
    manager.register(BuiltinRules(), name=BUILTIN_PLUGIN_NAME)
    if load_entrypoints:
        manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in plugins:
        manager.register(plugin)
    return manager


class HookRules:
    """A plugin manager's rule hooks under the names the decision functions call.

    :mod:`viasd_adapt.core.tiers` calls ``rules.gate1_accept_prob(tokens, p, u, settings, greedy)``
    on :data:`~viasd_adapt.core.rules.BUILTIN_RULES` or on this object alike; here each such name calls
    its hook (``viasd_gate1_accept_prob``) with the arguments by name, so the first plugin that
    answers decides. The names come from :data:`RULE_HOOKS`: nothing of the interface is restated.
    """

    def __init__(self, manager: pluggy.PluginManager):
        self.manager = manager
        for rule, hook, parameters in RULE_HOOKS:
            setattr(self, rule, partial(_call_by_name, getattr(manager.hook, hook), parameters))


def _call_by_name(hook: Any, parameters: tuple[str, ...], *args: Any) -> Any:
    return hook(**dict(zip(parameters, args)))


class TierObserver:
    """Sends committed tokens and finished cycles to the observer hooks."""

    def __init__(self, manager: pluggy.PluginManager, framework: str, mode: str):
        self.manager, self.framework, self.mode = manager, framework, mode

    def cycle(self, cycle, metrics, first_index: int) -> None:
        for offset, (token, tier) in enumerate(zip(cycle.tokens, cycle.tiers)):
            self.manager.hook.viasd_token_decided(
                event=TokenEvent(first_index + offset, int(token), int(tier), self.framework, self.mode)
            )
        self.manager.hook.viasd_cycle_finished(cycle=cycle, metrics=metrics)
