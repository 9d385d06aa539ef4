"""The pluggy hook interface: every gate, rule and threshold of the tier is replaceable.

The rule hooks are the methods of :class:`~viasd_adapt.core.rules.TierRules` (declared there, once,
as a :class:`typing.Protocol` whose methods are the hook specifications); :class:`ViasdHookSpec`
adds the observer hooks. Rule hooks are ``firstresult``: the first plugin that returns something
other than ``None`` wins. The built-in VIA-SD rules (:class:`~viasd_adapt.core.rules.BuiltinRules`,
whose methods carry the hook names) are registered as an ordinary plugin marked ``trylast``, so
any plugin a user registers runs before them and may either answer or return ``None`` to defer.
Observer hooks (``viasd_token_decided``, ``viasd_cycle_finished``) are called on every plugin.

Third-party plugins are found through the ``viasd_adapt`` entry-point group::

    [project.entry-points.viasd_adapt]
    my_router = "my_package.my_module"

The group is read once per process (a run context, and so a plugin manager, is built per run and
per tuning candidate; scanning every installed distribution each time is not free). A program that
installs a plugin package while it runs calls :func:`forget_entry_point_plugins` first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable

import pluggy

from viasd_adapt.core.markers import PROJECT_NAME, hookimpl, hookspec  # noqa: F401  (hookimpl: for plugin authors)
from viasd_adapt.core.modes import rule_checks
from viasd_adapt.core.rules import BuiltinRules, TierRules
from viasd_adapt.errors import ConfigError

ENTRY_POINT_GROUP = "viasd_adapt"


@dataclass(frozen=True)
class TokenEvent:
    """One committed token, as observers see it."""

    index: int  # position in the generated text (0 = first new token)
    token: int
    tier: int  # viasd_adapt.core.tiers.Tier value
    framework: str
    mode: str


class ViasdHookSpec(TierRules):
    """Hook specifications: the rule hooks of :class:`~viasd_adapt.core.rules.TierRules` (inherited,
    not restated), and the observer hooks."""

    @hookspec
    def viasd_token_decided(self, event: TokenEvent) -> None:
        """Observe every committed token and its tier."""

    @hookspec
    def viasd_cycle_finished(self, cycle: Any, metrics: Any) -> None:
        """Observe each draft-verify cycle (a :class:`~viasd_adapt.core.tiers.CycleResult`) and the
        running :class:`~viasd_adapt.core.metrics.TierMetrics`."""


BUILTIN_PLUGIN_NAME = "viasd-builtin-rules"


@functools.cache
def entry_point_plugins() -> tuple[tuple[str, object], ...]:
    """The ``(name, plugin)`` of each entry point in the ``viasd_adapt`` group, loaded once per
    process (the order pluggy's own loader uses: distributions as installed, then their entries)."""
    from importlib.metadata import distributions

    found = []
    for distribution in list(distributions()):
        for entry in distribution.entry_points:
            if entry.group == ENTRY_POINT_GROUP:
                found.append((entry.name, entry.load()))
    return tuple(found)


def forget_entry_point_plugins() -> None:
    """Reads the entry-point group again at the next plugin manager: for a program that installed
    a plugin package after its first run."""
    entry_point_plugins.cache_clear()


class _AddedRule:
    """The signatures of an added mode's rule hook, by the verifier it asks (methods, so that pluggy
    reads their arguments without ``self``)."""

    def on_full(self, tokens, p, q, settings, greedy):
        """Probability, per draft position, that q accepts the draft token under an added mode's rule."""

    def on_slim(self, tokens, p, u, settings, greedy):
        """Probability, per draft position, that u accepts the draft token under an added mode's rule."""


def added_rule_specs() -> type | None:
    """The hook specifications of the rules that rows added to the table of modes name and the built-in
    rules do not answer (:class:`~viasd_adapt.core.modes.Check`): ``firstresult``, with the arguments
    of the built-in rules of the same verifier (``tokens, p, q`` or ``u, settings, greedy``). None
    when every row asks a built-in rule."""
    known = {name for name in vars(TierRules) if name.startswith("viasd_")}
    new = {check.hook: check.verifier for check in rule_checks() if check.hook not in known}
    if not new:
        return None
    return type("AddedRuleSpecs", (), {hook: hookspec(firstresult=True)(_AddedRule.on_slim if verifier == "slim" else _AddedRule.on_full)
                                       for hook, verifier in new.items()})


def make_plugin_manager(plugins: Iterable[object] = (), load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A plugin manager with the built-in rules, entry-point plugins, then ``plugins``; its hooks are
    the rule and observer hooks, and the new rules of the modes added to the table of modes."""
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(ViasdHookSpec)
    added = added_rule_specs()
    if added is not None:  # the new rules of modes a program added to the table
        manager.add_hookspecs(added)
    manager.register(BuiltinRules(), name=BUILTIN_PLUGIN_NAME)
    if load_entrypoints:
        for name, plugin in entry_point_plugins():
            if manager.get_plugin(name) is None and not manager.is_blocked(name):
                manager.register(plugin, name=name)
    for plugin in plugins:
        manager.register(plugin)
    return manager


def manager_for_a_run(manager: pluggy.PluginManager, *own: tuple[str, object]) -> pluggy.PluginManager:
    """A new manager with ``manager``'s hook specifications and plugins, registered in the same
    order under the same names, and then the run's ``own`` ``(name, plugin)`` pairs (the
    drafter-quality monitor). What a run adds for itself never changes the manager its caller gave,
    which may serve other runs, in other threads, with other plugins."""
    run = pluggy.PluginManager(manager.project_name)
    namespaces = {id(caller.spec.namespace): caller.spec.namespace
                  for caller in vars(manager.hook).values() if getattr(caller, "spec", None) is not None}
    for namespace in namespaces.values():
        run.add_hookspecs(namespace)
    for name, plugin in manager.list_name_plugin():
        if plugin is not None:  # None: a name the caller blocked
            run.register(plugin, name=name)
        else:
            run.set_blocked(name)
    for name, plugin in own:
        run.register(plugin, name=name)
    return run


def hook_rules(manager: pluggy.PluginManager) -> TierRules:
    """The rules the decision functions call, answered by ``manager``'s plugins.

    That is the manager's hook relay itself: each rule hook has the name and the keyword parameters
    of its :class:`~viasd_adapt.core.rules.TierRules` method, and the decision functions pass
    arguments by keyword, so ``rules.viasd_gate1_accept_prob(tokens=..., ...)`` calls the hook and
    the first plugin that answers decides. A manager without the rule hooks (one not made by
    :func:`make_plugin_manager`) is refused here, by name, rather than at the first decision.
    """
    missing = [name for name in vars(TierRules) if name.startswith("viasd_") and not hasattr(manager.hook, name)]
    if missing:
        raise ConfigError(f"the plugin manager has no rule hooks {', '.join(missing)}: build it with "
                         "viasd_adapt.core.hooks.make_plugin_manager() (or add_hookspecs(ViasdHookSpec))")
    return manager.hook


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


__all__ = ["TokenEvent", "hookimpl", "make_plugin_manager"]
