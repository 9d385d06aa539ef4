"""A session: one ``patch``, the run context its calls run, and the metrics of those calls."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from torch import nn

from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.notices import emit
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.deprecated import deprecated_use
from viasd_adapt.engine.context import RunContext, drafter_identity
from viasd_adapt.routing.slim import SlimVerifier

FRAMEWORK = "hf"


@dataclass
class TierSession:
    """One ``patch``: the run context it opened (settings, slim verifier, plugins) and the metrics of
    the calls made under it.

    Attributes:
        context: the :class:`~viasd_adapt.engine.context.RunContext` the calls run (its settings, slim
            verifier, plugin manager); each call runs it for the call's drafter
            (:meth:`context_for`): for a drafter the tuned settings were not measured with, the
            defaults, for that call only.
        metrics: the sum over every tiered ``generate`` call made under this patch (one call: that call).
        history: the metrics of each call, in order.
        fallbacks: why calls ran the stock path instead (one line per such call).
    """

    target: nn.Module
    context: RunContext = field(repr=False)
    tokenizer: Any = None
    assistant_tokenizer: Any = None
    thread_id: int = field(default_factory=threading.get_ident)
    metrics: TierMetrics = field(default_factory=TierMetrics)
    history: list[TierMetrics] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    closed: bool = False
    share_prefix: bool = True
    _call: Any = field(default=None, repr=False)
    # the context of each drafter seen (by object for a model: fingerprinted once per session)
    _by_drafter: dict = field(default_factory=dict, repr=False)

    @contextlib.contextmanager
    def observing_stock_call(self, observer: Any) -> Iterator[None]:
        """``observer`` watches the stock ``generate`` call running in the block (mode none): the
        patch hands it the candidate generator transformers builds, so that the drafter's proposals
        and the target's verdicts are counted without changing the stock path."""
        self._call = observer
        try:
            yield
        finally:
            self._call = None

    @property
    def stock_observer(self) -> Any:
        """The observer of the stock call running now, else None."""
        return self._call

    @property
    def tier(self) -> RunContext:
        """The session's run context by its 0.2 name; deprecated (until 0.4.0): :attr:`context`."""
        deprecated_use("TierSession.tier", "TierSession.context")
        return self.context

    @property
    def settings(self) -> TierSettings:
        return self.context.settings

    @property
    def slim(self) -> SlimVerifier | None:
        return self.context.slim

    @property
    def plugins(self) -> tuple:
        return self.context.plugins

    @property
    def plugin_manager(self) -> Any:
        return self.context.plugin_manager

    def context_for(self, drafter: Any) -> RunContext:
        """The context of a call drafting with ``drafter`` (its assistant model, or prompt lookup):
        :meth:`RunContext.for_drafter`, once per drafter; its notices (tuned settings measured with
        another drafter) are given the first time."""
        key = id(drafter) if isinstance(drafter, nn.Module) else hash(drafter_identity(drafter))
        if key not in self._by_drafter:
            context = self.context.for_drafter(drafter)
            emit(context.notices)
            self._by_drafter[key] = (drafter, replace(context, notices=()))  # the drafter kept: its id stays its own
        return self._by_drafter[key][1]

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def last_metrics(self) -> TierMetrics | None:
        return self.history[-1] if self.history else None

    def _record(self, metrics: TierMetrics) -> None:
        self.history.append(metrics)
        self.metrics = self.metrics.merge(metrics)


__all__ = ["FRAMEWORK", "TierSession"]
