"""The one registry of frameworks, read by ``viasd generate``, ``viasd bench`` and ``viasd tune``.

A framework is a name, a one-line description, and a runner ``run(pair, request) -> RunOutput``
(:mod:`viasd_adapt.models.pair`). The adapters' runners live in their own modules and are imported only
when asked for, so listing frameworks costs nothing and no adapter is imported by the core. Two
runners live here because they are baselines rather than adapters:

* ``ar``: the target decoding on its own with HF ``generate`` (no drafter, no tier);
* ``engine``: classic speculative decoding through :mod:`viasd_adapt.engine`, the loop the HF
  adapter's tiered modes run; it separates the tier's effect from the difference between that loop
  and transformers' own.

Adding a framework is one :func:`register` call with its capabilities (docs/architecture.md,
"Adding a framework"): the commands, the bench, its verdict and its projection read those, never a
framework's name, so a framework registered here is one they can run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence


from viasd_adapt.checks import check_fits_context, check_max_new_tokens, check_prompt_ids, check_token_ids_in_vocabulary
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import DECODER_ONLY, ENCODER_DECODER, ModelKind, model_kind
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunOutput, RunRequest
from viasd_adapt.core.settings import Mode

Runner = Callable[[LoadedPair, RunRequest], RunOutput]
TIER_MODES = tuple(m.value for m in Mode)
PLAIN = "plain"

#: What a command can hand a framework besides the target and the prompt (the options that set
#: them, e.g. ``--draft``, ``--alpha1``, are the command's business): each framework declares the
#: ones it cannot honour (:attr:`Framework.ignores`), and :func:`refuse_unhonoured` refuses them by
#: option name, so that no option is silently dropped (``--framework eagle --draft X`` once ran the
#: EAGLE head and recorded the unused drafter).
DRAFTER = "drafter"  # a drafter model, or prompt-lookup (--draft)
EAGLE_HEAD = "eagle head"  # --eagle-head
MASK = "routing mask"  # --mask
TIER = "tier settings"  # --mode (other than none), --alpha1, --alpha2, --lenience, --preset
BLOCK_LENGTH = "draft block length"  # --gamma
SAMPLING = "sampling"  # --temperature, --top-p (every framework samples)
RUN_INPUTS = (DRAFTER, EAGLE_HEAD, MASK, TIER, BLOCK_LENGTH, SAMPLING)

_NO_TIER = "has no tier (no slim verifier, no thresholds): it decodes as shipped"
_NO_HEAD = "drafts with a drafter model; only eagle reads an EAGLE head"


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
        ignores: the run inputs (:data:`RUN_INPUTS`) this framework cannot honour, each with the
            reason, which :func:`refuse_unhonoured` gives when an option sets one.
        recommendation: for a baseline (:attr:`is_baseline`), the sentence the bench's verdict
            gives when the baseline's row is the one to use (None: a sentence naming it).
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
    ignores: Mapping[str, str] = field(default_factory=dict, hash=False)
    recommendation: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ignores) - set(RUN_INPUTS))
        if unknown:
            raise ValueError(f"framework {self.name!r} ignores unknown run inputs {unknown}; known: {RUN_INPUTS}")

    def honours(self, run_input: str) -> bool:
        """Whether a run of this framework uses ``run_input`` (one of :data:`RUN_INPUTS`)."""
        return run_input not in self.ignores

    @property
    def is_baseline(self) -> bool:
        """A baseline, not a framework with a verify step to wrap (the target alone, stock prompt
        lookup): exact and simple, a candidate in every framework's verdict, with no verdict of its own."""
        return not self.has_tier

    @property
    def runs_target_alone(self) -> bool:
        """One target pass per token and nothing else: the reference every bench row is compared with."""
        return self.bound_kind == "ar"

    @property
    def runs_stock_only(self) -> bool:
        """Runs only as shipped (viasd-adapt never enters its loop): a run of it is a stock run,
        keeps no tiers, and says ``stock`` where a run names its mode."""
        return self.has_plain and not self.has_tier

    @property
    def overlaps_drafting(self) -> bool:
        """Drafts while the target verifies (PEARL): its analytic bound overlaps the two."""
        return self.bound_kind == "overlapped"

    @property
    def drafts_with_head(self) -> bool:
        """Drafts with an EAGLE head rather than a drafter model or prompt lookup."""
        return self.honours(EAGLE_HEAD)

    def load(self, kind: ModelKind | bool = DECODER_ONLY) -> Runner:
        """The runner for a target of ``kind`` (:func:`viasd_adapt.model_kind.model_kind`; a bool
        is the former ``encoder_decoder`` flag), imported now."""
        if isinstance(kind, bool):
            kind = ENCODER_DECODER if kind else DECODER_ONLY
        runner = kind.runner_of(self)
        module, _, function = runner.partition(":")
        try:
            return getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as error:  # a registration that names no runner: said by its name
            raise ConfigError(f"framework {self.name!r}: its runner {runner!r} cannot be loaded ({error})") from None

    def unavailable(self, pair: LoadedPair | None = None) -> str | None:
        """Why this framework cannot run (with this pair), or None. What the framework cannot do
        at all comes first (an encoder-decoder target), before what it would need (a head, ...)."""
        if pair is not None and pair.target is not None and model_kind(pair.target).runner_of(self) is None:
            others = _names(lambda f: model_kind(pair.target).runner_of(f) is not None)
            return (f"runs decoder-only targets only; {type(pair.target).__name__} is an encoder-decoder model "
                    f"(use {others})")
        for module in self.needs_modules:
            if importlib.util.find_spec(module.split(".")[0]) is None:
                return f"needs the Python package providing {module!r} (pip install --no-deps eagle-llm==1.2.1)"
        if self.needs_eagle_head and pair is not None and not pair.eagle_head:
            return "needs an EAGLE head (--eagle-head PATH, or a pair that ships eagle_head/)"
        if self.has_tier and pair is not None and pair.draft is None and not self.needs_eagle_head:
            if pair.lookup is None:
                return "needs a drafter (--draft PATH)"
            if not self.takes_lookup:
                return f"needs a drafter model; prompt lookup runs in the {_names(lambda f: f.takes_lookup, 'and')} frameworks"
        return None


FRAMEWORKS: dict[str, Framework] = {}


def _names(which: Callable[[Framework], bool], last: str = "or") -> str:
    """The registered frameworks ``which`` holds for, in words: ``"ar, engine or hf"``."""
    names = sorted(name for name, framework in FRAMEWORKS.items() if which(framework))
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def refuse_unhonoured(names: Sequence[str], given: Iterable[tuple[str, str]], chosen_by: str = "--framework") -> None:
    """Refuses every option that none of the frameworks ``names`` can honour, by its name.

    ``given``: ``(run input, option as typed)`` for every option the user gave (not the ones a
    ``--pair`` or a default filled in), e.g. ``(DRAFTER, "--draft prompt-lookup")``. One framework
    (``viasd generate``) must honour each; for several (``viasd bench``'s ``--frameworks``), at least
    one of them must. The error names the option and says why each framework cannot use it;
    ``chosen_by`` is the option that named the frameworks."""
    chosen = [get(name) for name in names]
    for run_input, option in given:
        if run_input not in RUN_INPUTS:
            raise ValueError(f"unknown run input {run_input!r}; known: {RUN_INPUTS}")
        if chosen and not any(f.honours(run_input) for f in chosen):
            why = "; ".join(f"{f.name} {f.ignores[run_input]}" for f in chosen)
            frameworks = ", ".join(f.name for f in chosen)
            article = "" if run_input.endswith("s") else ("an " if run_input[0] in "aeiou" else "a ")
            raise ConfigError(f"{option}: {chosen_by} {frameworks} cannot use {article}"
                              f"{run_input} ({why}); leave the option out")


def register(framework: Framework) -> Framework:
    """Adds (or replaces) a framework; returns it."""
    FRAMEWORKS[framework.name] = framework
    return framework


def unregister(name: str) -> Framework:
    """Removes the framework called ``name``; returns it. An unknown name is refused by name."""
    framework = get(name)
    del FRAMEWORKS[name]
    return framework


@contextlib.contextmanager
def registered(framework: Framework) -> Iterator[Framework]:
    """``framework`` registered for the ``with`` block only; the framework it replaced (if any) is
    put back after it, however the block ends."""
    replaced = FRAMEWORKS.get(framework.name)
    register(framework)
    try:
        yield framework
    finally:
        if replaced is not None:
            register(replaced)
        else:
            FRAMEWORKS.pop(framework.name, None)


def names() -> tuple[str, ...]:
    """The registered frameworks' names, in the order they were registered (the CLI's choices)."""
    return tuple(FRAMEWORKS)


def declared(name: str) -> Framework | None:
    """The framework called ``name``, or None for a name none is registered under (a row of a
    report that a framework registered elsewhere wrote): readers of saved rows ask this, not :func:`get`."""
    return FRAMEWORKS.get(name)


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


# Registered in the order the CLI lists them (``viasd generate --help``).
register(Framework("ar", "autoregressive target decoding (HF generate, no assistant)", "viasd_adapt.frameworks.baselines:run_ar",
                   has_tier=False, bound_kind="ar", seq2seq_runner="viasd_adapt.frameworks.seq2seq:run_ar",
                   ignores={DRAFTER: "runs the target alone (no drafter)", EAGLE_HEAD: "runs the target alone (no drafter)",
                            MASK: _NO_TIER, TIER: _NO_TIER, BLOCK_LENGTH: "decodes one token per target pass (no drafts)"},
                   recommendation="Speculative decoding itself does not pay here, so neither does the slim tier: use ar "
                                  "(the target alone)."))
register(Framework("engine", "classic SD through viasd_adapt.engine (the loop the hf adapter's tiered modes run)",
                   "viasd_adapt.frameworks.baselines:run_engine", takes_lookup=True, seq2seq_runner="viasd_adapt.frameworks.seq2seq:run_engine",
                   ignores={EAGLE_HEAD: _NO_HEAD}))
register(Framework("hf", "HF assisted generation: target.generate(assistant_model=draft), patched by viasd_adapt.adapters.hf",
                   "viasd_adapt.adapters.hf:run", has_plain=True, takes_lookup=True, seq2seq_runner="viasd_adapt.adapters.hf_seq2seq:run",
                   ignores={EAGLE_HEAD: _NO_HEAD}))
register(Framework("pearl", "PEARL (viasd_adapt.adapters.pearl.pearl_generate, parallel drafter/target threads)",
                   "viasd_adapt.adapters.pearl:run", bound_kind="overlapped", ignores={EAGLE_HEAD: _NO_HEAD}))
register(Framework("eagle", "EAGLE (eagle-llm EaModel.eagenerate through viasd_adapt.adapters.eagle; its own base-model copy)",
                   "viasd_adapt.adapters.eagle:run", has_plain=True, bound_kind="none", needs_eagle_head=True,
                   needs_modules=("eagle.model.ea_model",),
                   ignores={DRAFTER: "drafts with its EAGLE head (--eagle-head), not a drafter model or prompt lookup",
                            BLOCK_LENGTH: "drafts a tree of a fixed shape (eagle's mc_sim_7b_63), not blocks of --gamma tokens"}))
register(Framework("lookup", "stock HF prompt lookup (generate(prompt_lookup_num_tokens=gamma); no drafter model, "
                   "no viasd-adapt): a baseline", "viasd_adapt.frameworks.baselines:run_prompt_lookup", has_plain=True, has_tier=False,
                   ignores={DRAFTER: "drafts n-grams of the text (no drafter model)",
                            EAGLE_HEAD: "drafts n-grams of the text (no drafter model)", MASK: _NO_TIER, TIER: _NO_TIER},
                   recommendation="Stock prompt lookup (no drafter model, no tier) is the row to use, so the slim tier does "
                                  "not pay: use lookup (generate(prompt_lookup_num_tokens=...))."))

__all__ = ["BLOCK_LENGTH", "DRAFTER", "EAGLE_HEAD", "FRAMEWORKS", "MASK", "PLAIN", "RUN_INPUTS", "SAMPLING", "TIER",
           "TIER_MODES", "Framework", "check_request_fits", "declared", "get", "names", "refuse_unhonoured", "register",
           "registered", "run", "unregister"]
