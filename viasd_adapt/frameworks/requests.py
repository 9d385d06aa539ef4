"""What every framework runner speaks: a :class:`RunRequest` in, a :class:`RunOutput` out.

``viasd generate``, ``viasd bench`` and ``viasd tune`` load a pair once
(:class:`~viasd_adapt.models.pair.LoadedPair`) and hand it with a request to a framework's runner
(:mod:`viasd_adapt.frameworks.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from viasd_adapt.core.markers import hookimpl
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings

if TYPE_CHECKING:  # pragma: no cover - a request names its context's type without importing torch
    from viasd_adapt.engine.context import RunContext


#: ``RunRequest.mode`` of a stock run: the framework without viasd-adapt at all (where such a path exists).
STOCK_MODE = "plain"

#: What :attr:`RunRequest.on_tokens` is called with: tokens just committed, and their tiers (None
#: for a run that keeps no tiers, such as stock prompt lookup).
TokenCallback = Callable[[list[int], "list[int] | None"], None]


class TokenStreamPlugin:
    """An observer plugin (:mod:`viasd_adapt.core.hooks`) that hands every committed token and its
    tier to a callback, as the verify step decides it: how a tiered run streams its output without
    any framework knowing about streaming."""

    def __init__(self, on_tokens: TokenCallback):
        self.on_tokens = on_tokens

    @hookimpl
    def viasd_token_decided(self, event) -> None:
        self.on_tokens([event.token], [event.tier])


@dataclass(frozen=True)
class RunRequest:
    """One generation by one framework.

    Two kinds of run, told apart by :attr:`stock`:

    * a **tiered** run (``stock=False``): viasd-adapt's verify step in the tier mode
      ``settings.mode`` (``none``, the untiered baseline, included); ``mode`` is that mode's name;
    * a **stock** run (``stock=True``): the framework as shipped, viasd-adapt not in the loop (HF's
      own ``generate``, EAGLE's own ``eagenerate``); ``mode`` is ``"plain"`` and ``settings`` only
      supply sizes such as ``gamma``.

    A tiered request built from a run's :class:`~viasd_adapt.engine.context.RunContext` holds it, and
    its ``mode`` and ``settings`` are the context's (:meth:`of`): they cannot disagree. Without a
    context, the runner builds the pair's own for ``settings`` (:meth:`context_on`). ``mode`` is kept
    as the first field (and ``"plain"`` as its stock value) because every framework runner and the
    bench's rows speak it; build requests with :meth:`of`, :meth:`tiered` and :meth:`stock_run`.
    ``stop_at_eos=False`` generates exactly ``max_new_tokens`` (benchmarks: every row does the same
    amount of work).
    """

    mode: str
    prompt_ids: list[int]
    max_new_tokens: int
    #: the run's settings; for a request with a context, the context's (derived when not given)
    settings: TierSettings | None = None
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0
    stop_at_eos: bool = True
    # Encoder-decoder targets: ``prompt_ids`` are the SOURCE ids (the decoder starts from its
    # decoder_start_token_id); a target that reads features (Whisper) takes them here instead,
    # ``(1, mel, frames)`` (:func:`viasd_adapt.frameworks.seq2seq.load_input_features`).
    input_features: Any = None
    # Called as tokens are committed (:data:`TokenCallback`): ``viasd generate`` streams through it.
    # Tiered runs reach it through :attr:`stream_plugins`; a runner that cannot stream ignores it.
    on_tokens: TokenCallback | None = field(default=None, compare=False, repr=False)
    #: The run's context (its settings, mask, tuned evidence, plugins), when the caller built it
    #: (``viasd generate``, ``viasd tune``); None: the runner builds the pair's own for
    #: :attr:`settings` (:meth:`context_on`).
    context: RunContext | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.context is not None and not self.stock:
            derived = self.context.settings
            if self.settings is not None and self.settings != derived or self.mode != derived.mode.value:
                raise ConfigError("a RunRequest's settings and its run context's disagree; build the request from "
                                  "the context (RunRequest.of(context, ids, n))")
            object.__setattr__(self, "settings", derived)
        elif self.settings is None:
            raise ConfigError("a RunRequest needs its settings, or the run's context (RunRequest.of(context, ids, n))")

    def context_on(self, pair: Any, **options: Any) -> RunContext:
        """The run's context: the one the request carries, else the pair's for :attr:`settings` with
        :attr:`stream_plugins` (:meth:`~viasd_adapt.models.pair.LoadedPair.run_context`; ``options``
        are its own, e.g. ``drafter``). Nothing is read: the pair holds what it read when loaded. The
        mask's Delta advice is the command's to give, once (the bench prints it), not each request's."""
        if self.context is not None:
            return self.context
        return pair.run_context(self.settings, self.stream_plugins, advice=False, **options)

    @property
    def stream_plugins(self) -> tuple:
        """The observer plugins a tiered runner adds to its verify step so that :attr:`on_tokens`
        sees each token as it is committed (empty without a callback)."""
        return (TokenStreamPlugin(self.on_tokens),) if self.on_tokens is not None else ()

    @property
    def stock(self) -> bool:
        """Whether this is the framework without viasd-adapt (``mode == "plain"``)."""
        return self.mode == STOCK_MODE

    @classmethod
    def of(cls, context: RunContext, prompt_ids: list[int], max_new_tokens: int, **options: Any) -> "RunRequest":
        """A run through viasd-adapt's verify step with ``context``: its mode and settings are the context's."""
        return cls(context.mode.value, prompt_ids, max_new_tokens, context.settings, context=context, **options)

    @classmethod
    def tiered(cls, prompt_ids: list[int], max_new_tokens: int, settings: TierSettings | None = None,
               **options: Any) -> "RunRequest":
        """A run through viasd-adapt's verify step in ``settings.mode`` (with ``context=``: the context's)."""
        context = options.get("context")
        if settings is None and context is not None:
            settings = context.settings
        if settings is None:
            raise ConfigError("RunRequest.tiered needs settings, or the run's context (RunRequest.of(context, ids, n))")
        return cls(settings.mode.value, prompt_ids, max_new_tokens, settings, **options)

    @classmethod
    def stock_run(cls, prompt_ids: list[int], max_new_tokens: int, settings: TierSettings, **options: Any) -> "RunRequest":
        """A run of the framework as shipped (no viasd-adapt); ``settings`` become untiered (mode none)."""
        return cls(STOCK_MODE, prompt_ids, max_new_tokens, settings.with_(mode="none"), **options)


@dataclass
class RunOutput:
    """Generated ids (prompt excluded), the metrics when the run kept any, and notes for people."""

    tokens: list[int]
    metrics: TierMetrics | None = None
    notes: list[str] = field(default_factory=list)
    extra_bytes: int = 0  # buffers outside HF cache objects (EAGLE's pre-allocated KV cache)

    @property
    def tiers(self) -> list[int] | None:
        return None if self.metrics is None else self.metrics.token_tiers[: len(self.tokens)]


__all__ = ["RunOutput", "RunRequest", "STOCK_MODE", "TokenCallback", "TokenStreamPlugin"]
