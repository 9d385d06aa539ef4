"""The one registry of frameworks, read by ``viasd generate``, ``viasd bench`` and ``viasd tune``.

A framework is a name, a one-line description, and a runner ``run(pair, request) -> RunOutput``
(:mod:`viasd_adapt.models.pair`). The adapters' runners live in their own modules and are imported only
when asked for, so listing frameworks costs nothing and no adapter is imported by the core. Two
runners live here because they are baselines rather than adapters:

* ``ar``: the target decoding on its own with HF ``generate`` (no drafter, no tier);
* ``engine``: classic speculative decoding through :mod:`viasd_adapt.engine`, the loop the HF
  adapter's tiered modes run; it separates the tier's effect from the difference between that loop
  and transformers' own.

Adding a framework is one :func:`register` call.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Callable


from viasd_adapt.checks import check_fits_context, check_max_new_tokens, check_prompt_ids, check_token_ids_in_vocabulary
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import DECODER_ONLY, ENCODER_DECODER, ModelKind, model_kind
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunOutput, RunRequest
from viasd_adapt.core.settings import Mode

Runner = Callable[[LoadedPair, RunRequest], RunOutput]
TIER_MODES = tuple(m.value for m in Mode)
PLAIN = "plain"


@dataclass(frozen=True)
class Framework:
    """One framework the commands can run.

    Attributes:
        name: the ``--framework(s)`` name and the JSON ``framework`` field.
        description: which code path its runs go through (printed by the bench).
        runner: ``"module:function"``, imported on first use.
        has_plain: whether a ``plain`` run exists (the framework with viasd-adapt not installed);
            ``none`` vs ``plain`` measures the overhead of an installed but switched-off tier.
        has_tier: False for the autoregressive baseline, which has no verify step.
        takes_lookup: whether a prompt-lookup drafter (no model) can stand in for the drafter model.
        bound_kind: how the bench models its cost: ``"sequential"`` (draft, then verify),
            ``"overlapped"`` (drafting runs while verifying, PEARL), ``"none"`` (not modelled:
            EAGLE's tree), ``"ar"`` (one target pass per token).
        needs_eagle_head: the pair must ship an EAGLE head.
        needs_modules: Python modules that must be importable (eagle-llm).
    """

    name: str
    description: str
    runner: str
    has_plain: bool = False
    has_tier: bool = True
    bound_kind: str = "sequential"
    needs_eagle_head: bool = False
    needs_modules: tuple[str, ...] = ()
    takes_lookup: bool = False
    seq2seq_runner: str | None = None  # "module:function" for encoder-decoder pairs; None = unsupported

    def load(self, kind: ModelKind | bool = DECODER_ONLY) -> Runner:
        """The runner for a target of ``kind`` (:func:`viasd_adapt.model_kind.model_kind`; a bool
        is the former ``encoder_decoder`` flag), imported now."""
        if isinstance(kind, bool):
            kind = ENCODER_DECODER if kind else DECODER_ONLY
        module, _, function = kind.runner_of(self).partition(":")
        return getattr(importlib.import_module(module), function)

    def unavailable(self, pair: LoadedPair | None = None) -> str | None:
        """Why this framework cannot run (with this pair), or None. What the framework cannot do
        at all comes first (an encoder-decoder target), before what it would need (a head, ...)."""
        if pair is not None and pair.target is not None and model_kind(pair.target).runner_of(self) is None:
            return (f"runs decoder-only targets only; {type(pair.target).__name__} is an encoder-decoder model "
                    "(use ar, engine or hf)")
        for module in self.needs_modules:
            if importlib.util.find_spec(module.split(".")[0]) is None:
                return f"needs the Python package providing {module!r} (pip install --no-deps eagle-llm==1.2.1)"
        if self.needs_eagle_head and pair is not None and not pair.eagle_head:
            return "needs an EAGLE head (--eagle-head PATH, or a pair that ships eagle_head/)"
        if self.has_tier and pair is not None and pair.draft is None and not self.needs_eagle_head:
            if pair.lookup is None:
                return "needs a drafter (--draft PATH)"
            if not self.takes_lookup:
                return "needs a drafter model; prompt lookup runs in the hf and engine frameworks"
        return None


FRAMEWORKS: dict[str, Framework] = {}


def register(framework: Framework) -> Framework:
    """Adds (or replaces) a framework; returns it."""
    FRAMEWORKS[framework.name] = framework
    return framework


def get(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ConfigError(f"unknown framework {name!r}; known: {', '.join(sorted(FRAMEWORKS))}") from None


def run(name: str, pair: LoadedPair, request: RunRequest) -> RunOutput:
    """Runs ``request`` with framework ``name`` on ``pair``."""
    framework = get(name)
    # Checked before what the framework needs (an EAGLE head, ...): asking for a head that could
    # never run an encoder-decoder target would send the user after the wrong thing.
    kind = model_kind(pair.target)
    if kind.runner_of(framework) is None:
        supported = ", ".join(sorted(n for n, f in FRAMEWORKS.items() if kind.runner_of(f)))
        raise ConfigError(f"framework {name!r} does not support {kind.name} targets ({type(pair.target).__name__}); "
                          f"use one of: {supported}")
    reason = framework.unavailable(pair)
    if reason:
        raise ConfigError(f"framework {name!r} cannot run: {reason}")
    if request.mode == PLAIN and not framework.has_plain:
        raise ConfigError(f"framework {name!r} has no plain (viasd-adapt-free) path")
    if not kind.prompt_is_source:  # a source is checked against the encoder by its runner (request_source)
        check_request_fits(pair, request)
    return framework.load(kind)(pair, request)


def check_request_fits(pair: LoadedPair, request: RunRequest) -> None:
    """The prompt's ids index both models' vocabularies and prompt + budget fit both models'
    positions. Checked once here for every framework (plain runs included), because past the
    limit rotary models degenerate silently and GPT-2 dies with an IndexError inside torch."""
    prompt = check_prompt_ids(request.prompt_ids)
    check_max_new_tokens(request.max_new_tokens)
    for role, model in (("target", pair.target), ("drafter", pair.draft)):
        if model is not None:
            check_token_ids_in_vocabulary(prompt, model)
            check_fits_context(model, len(prompt), request.max_new_tokens, role=role)


register(Framework("ar", "autoregressive target decoding (HF generate, no assistant)", "viasd_adapt.frameworks.baselines:run_ar",
                   has_tier=False, bound_kind="ar", seq2seq_runner="viasd_adapt.frameworks.seq2seq:run_ar"))
register(Framework("lookup", "stock HF prompt lookup (generate(prompt_lookup_num_tokens=gamma); no drafter model, "
                   "no viasd-adapt): a baseline", "viasd_adapt.frameworks.baselines:run_prompt_lookup", has_plain=True, has_tier=False))
register(Framework("engine", "classic SD through viasd_adapt.engine (the loop the hf adapter's tiered modes run)",
                   "viasd_adapt.frameworks.baselines:run_engine", takes_lookup=True, seq2seq_runner="viasd_adapt.frameworks.seq2seq:run_engine"))
register(Framework("hf", "HF assisted generation: target.generate(assistant_model=draft), patched by viasd_adapt.adapters.hf",
                   "viasd_adapt.adapters.hf:run", has_plain=True, takes_lookup=True, seq2seq_runner="viasd_adapt.adapters.hf_seq2seq:run"))
register(Framework("pearl", "PEARL (viasd_adapt.adapters.pearl.pearl_generate, parallel drafter/target threads)",
                   "viasd_adapt.adapters.pearl:run", bound_kind="overlapped"))
register(Framework("eagle", "EAGLE (eagle-llm EaModel.eagenerate through viasd_adapt.adapters.eagle; its own base-model copy)",
                   "viasd_adapt.adapters.eagle:run", has_plain=True, bound_kind="none", needs_eagle_head=True,
                   needs_modules=("eagle.model.ea_model",)))


__all__ = ["FRAMEWORKS", "PLAIN", "TIER_MODES", "Framework", "check_request_fits", "get", "register", "run",
           ]
