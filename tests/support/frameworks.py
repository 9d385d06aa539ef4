"""One driver per framework, so that the conformance suite (tests/conformance/) states each concern
once and runs it on every framework: the engine loop, the HF adapter (decoder-only and
encoder-decoder targets), PEARL and EAGLE.

A driver wraps a pair and runs one generation the way that framework's users call it
(``speculative_generate``, ``target.generate(assistant_model=...)`` inside ``hf.tiered``,
``pearl_generate``, ``eagle.generate``), returning the tokens, their tiers and the metrics. It
passes ``mask``, ``settings`` and the drafter through unchanged, so the error tests see exactly what
the framework does with bad ones. Prompts are opaque to the tests: token lists for decoder-only
frameworks, source keyword dicts for encoder-decoder targets.
"""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn

import viasd_adapt
from tests.support.pairs import TinyPair, greedy_reference
from viasd_adapt.core.hooks import hookimpl, make_plugin_manager
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.core.settings import TierSettings

GREEDY = SamplingConfig()
DEFAULT = object()  # "the driver's own mask / drafter"


@dataclass
class Generation:
    tokens: list[int]
    tiers: list[int]
    metrics: TierMetrics


class Recorder:
    """An observer plugin: every decided token and every finished cycle, in order."""

    def __init__(self) -> None:
        self.events: list = []
        self.cycles: list = []  # (tokens, metrics.committed after the cycle)
        self.results: list = []  # the cycle results themselves (tiers, escalated, ...)

    @hookimpl
    def viasd_token_decided(self, event):
        self.events.append(event)

    @hookimpl
    def viasd_cycle_finished(self, cycle, metrics):
        self.cycles.append((list(cycle.tokens), metrics.committed))
        self.results.append(cycle)


class Boom(RuntimeError):
    """The exception the scope tests raise inside a generation."""


class ExplodingObserver:
    """An observer that raises when the ``at``-th token is decided: an error inside a generation,
    in every mode and framework (observers run on the verifying thread, mid-generation)."""

    def __init__(self, at: int = 3) -> None:
        self.calls, self.at = 0, at

    @hookimpl
    def viasd_token_decided(self, event):
        self.calls += 1
        if self.calls == self.at:
            raise Boom("observer exploded")


@dataclass
class Driver:
    """Common part: the pair, the prompts, the reference outputs and full-pass counting."""

    pair: TinyPair
    prompts: list = field(default_factory=list)
    name: str = "?"
    #: index of the first generated token that a drafting cycle decides (1: a q prefill makes the first)
    first_drafted: int = 0
    vocab_size: int = 0

    @property
    def target(self) -> nn.Module:
        return self.pair.target

    @property
    def mask(self) -> RoutingMask:
        return self.pair.mask

    def generate(self, prompt, n: int, settings, **kw) -> Generation:
        raise NotImplementedError

    def reference(self, prompt, n: int) -> list[int]:
        """The target's own greedy continuation (a full forward per token, argmax)."""
        return greedy_reference(self.target, prompt, n)

    def stock(self, prompt, n: int, gamma: int = 4) -> list[int] | None:
        """Stock assisted generation's greedy output, for frameworks that wrap one (else None)."""
        return None

    def bad_prompts(self) -> dict[str, Any]:
        """``empty`` and ``outside_vocabulary`` prompts for the error tests."""
        return {"empty": [], "outside_vocabulary": [1, self.vocab_size + 5]}

    def other_vocab_drafter(self) -> nn.Module | None:
        from viasd_adapt.models.tiny import tiny_model

        return tiny_model("llama", 3, num_layers=1, vocab_size=self.vocab_size - 16)

    @contextlib.contextmanager
    def count_full_passes(self, mask: RoutingMask | None = None) -> Iterator[list]:
        """Full-verifier passes counted from the outside: calls of the decoder layer at the mask's
        first skipped layer s1. Every q pass runs it (a plain forward, or one resumed at s1) and no
        slim pass does, whichever weight-sharing view the pass goes through (the drafters here are
        other models)."""
        from viasd_adapt.routing.view import block_output_arities

        mask = mask or self.mask
        block_output_arities(self.target)  # a view's one-off probe of the layer outputs is not a pass
        calls: list = []
        layer = find_decoder_stack(self.target).layers[mask.first_skipped]
        hook = layer.register_forward_pre_hook(lambda module, args: calls.append(1))
        try:
            yield calls
        finally:
            hook.remove()

    # -- exact distributions for the sampling tests

    def models_for_controls(self, with_slim: bool = True) -> dict[str, nn.Module]:
        """The drafter p and the slim verifier u, whose distributions a broken cascade would leak."""
        models = {"drafter p": self.pair.drafter}
        if with_slim:
            models["slim u"] = SlimVerifier(self.target, self.mask).model
        return models

    def next_probs(self, model: nn.Module, prompt, sampling: SamplingConfig) -> Callable[[list[list[int]]], torch.Tensor]:
        """``prefixes -> (len, V)`` warped next-token distributions of ``model`` after the prompt."""

        @torch.no_grad()
        def probs(prefixes: list[list[int]]) -> torch.Tensor:
            rows = [model(torch.tensor([list(prompt) + prefix])).logits[0, -1] for prefix in prefixes]
            return probs_from_logits(torch.stack(rows), sampling)

        return probs

    # -- scope (frameworks that patch something)

    def snapshot(self):
        """What a scope must leave as it found it (compared before and after)."""
        return None

    def scope(self, settings):
        """The framework's own scope (``hf.tiered``, ``eagle.tiered``), for those that have one."""
        raise NotImplementedError(f"{self.name} has no scope")

    @contextlib.contextmanager
    def failing_drafter(self, at: int = 3) -> Iterator[list]:
        """The drafter's ``at``-th forward raises :class:`Boom`: an error from inside a generation,
        in every mode, on the thread the framework runs its drafter on."""
        calls: list = []

        def hook(module, args, kwargs):
            calls.append(1)
            if len(calls) == at:
                raise Boom("drafter exploded")

        handle = self.pair.drafter.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield calls
        finally:
            handle.remove()

    def assert_pristine(self) -> None:
        pass


def _sampling_kwargs(sampling: SamplingConfig) -> dict:
    if sampling.greedy:
        return dict(do_sample=False)
    return dict(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p)


# ============================================================================== engine


@dataclass
class EngineDriver(Driver):
    """``speculative_generate(ModelDrafter, TieredVerifier)``: the loop the HF adapter runs."""

    name: str = "engine"
    first_drafted: int = 1  # a q prefill decides the first token

    def generate(self, prompt, n, settings, *, sampling=GREEDY, seed=0, mask=DEFAULT, plugins=(), eos=None,
                 drafter=DEFAULT, variant=None) -> Generation:
        from viasd_adapt.engine.drafters import ModelDrafter
        from tests.support.verifiers import tiered_verifier
        from viasd_adapt.engine.loop import speculative_generate

        mask = self.mask if mask is DEFAULT else mask
        drafter = self.pair.drafter if drafter is DEFAULT else drafter
        uses_slim = getattr(getattr(settings, "mode", None), "uses_slim", True)
        slim = SlimVerifier(self.target, mask) if mask is not None and uses_slim else None
        verifier = tiered_verifier(self.target, settings, sampling, slim=slim, framework="engine",
                                   plugin_manager=make_plugin_manager(list(plugins), load_entrypoints=False))
        out = speculative_generate(ModelDrafter(drafter, sampling), verifier, prompt, n, [] if eos is None else [eos],
                                   generator=torch.Generator().manual_seed(seed))
        return Generation(out.tokens, out.tiers, out.metrics)

    def snapshot(self):
        """The target's instance attributes and submodules (transformers' own one-off flag for the
        output-capturing hooks it installs on first use is not ours), and a greedy output."""
        attributes = sorted(k for k in self.target.__dict__ if k != "_output_capturing_hooks_installed")
        return attributes, sorted(self.target._modules), self.reference(self.prompts[1], 6)

    def assert_pristine(self) -> None:
        assert not self.target._forward_hooks and not self.target._forward_pre_hooks


# ============================================================================== HF adapter


@dataclass
class HFDriver(Driver):
    """``target.generate(assistant_model=drafter)`` inside ``hf.tiered`` (mode none: stock, observed).

    Decoder-only prompts are token lists; encoder-decoder prompts are ``source_for`` dicts and the
    output is the decoder's tokens after its start token.
    """

    name: str = "hf"

    def __post_init__(self) -> None:
        for model in (self.pair.target, self.pair.drafter):  # EOS only where a test asks for it
            model.generation_config.eos_token_id = None
            if model.generation_config.pad_token_id is None:
                model.generation_config.pad_token_id = 0

    @property
    def encoder_decoder(self) -> bool:
        return bool(getattr(self.target.config, "is_encoder_decoder", False))

    def _call(self, prompt, n, sampling, eos, **extra):
        if self.encoder_decoder:
            kwargs = dict(prompt)
        else:
            ids = torch.tensor([list(prompt)], dtype=torch.long)
            kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
        kwargs.update(max_new_tokens=n, eos_token_id=eos, **_sampling_kwargs(sampling), **extra)
        return kwargs

    def _new_tokens(self, prompt, out: torch.Tensor) -> list[int]:
        if self.encoder_decoder:  # after the decoder prompt (Whisper's generate strips its own)
            if self.target.config.model_type == "whisper":
                return out[0].tolist()
            return out[0, prompt["decoder_input_ids"].shape[1] if "decoder_input_ids" in prompt else 1:].tolist()
        return out[0, len(prompt):].tolist()

    def generate(self, prompt, n, settings, *, sampling=GREEDY, seed=0, mask=DEFAULT, plugins=(), eos=None,
                 drafter=DEFAULT, variant=None, **extra) -> Generation:
        from viasd_adapt.adapters import hf

        mask = self.mask if mask is DEFAULT else mask
        drafter = self.pair.drafter if drafter is DEFAULT else drafter
        if isinstance(settings, TierSettings):  # stock (mode none) drafts what the assistant's config says
            hf.fix_draft_length(drafter, settings.gamma)
        torch.manual_seed(seed)
        with hf.tiered(self.target,
                       context=viasd_adapt.context(self.target,
                                                   mask=mask, settings=settings, plugins=plugins)) as session:
            with torch.no_grad():
                out = self.target.generate(assistant_model=drafter, **self._call(prompt, n, sampling, eos, **extra))
        assert not session.fallbacks, session.fallbacks
        metrics = session.last_metrics
        return Generation(self._new_tokens(prompt, out), list(metrics.token_tiers), metrics)

    def reference(self, prompt, n):
        if not self.encoder_decoder:
            return greedy_reference(self.target, prompt, n)
        with torch.no_grad():
            return self._new_tokens(prompt, self.target.generate(**self._call(prompt, n, GREEDY, None)))

    def stock(self, prompt, n, gamma: int = 4):
        from viasd_adapt.adapters import hf

        hf.fix_draft_length(self.pair.drafter, gamma)
        with torch.no_grad():
            out = self.target.generate(assistant_model=self.pair.drafter, **self._call(prompt, n, GREEDY, None))
        return self._new_tokens(prompt, out)

    def bad_prompts(self):
        if not self.encoder_decoder:
            return super().bad_prompts()
        return {"empty": {"input_ids": torch.zeros((1, 0), dtype=torch.long)},
                "outside_vocabulary": {"input_ids": torch.tensor([[1, self.vocab_size + 5]])}}

    def other_vocab_drafter(self):
        if not self.encoder_decoder:
            return super().other_vocab_drafter()
        from viasd_adapt.models.tiny_seq2seq import tiny_seq2seq_model

        return tiny_seq2seq_model(self.target.config.model_type, 4, decoder_layers=1, vocab_size=self.vocab_size - 16)

    def next_probs(self, model, prompt, sampling):
        if not self.encoder_decoder:
            return super().next_probs(model, prompt, sampling)
        start = self.target.generation_config.decoder_start_token_id

        @torch.no_grad()
        def probs(prefixes):
            rows = [model(**prompt, decoder_input_ids=torch.tensor([[start] + prefix])).logits[0, -1] for prefix in prefixes]
            return probs_from_logits(torch.stack(rows), sampling)

        return probs

    def snapshot(self):
        """Stock outputs (plain and assisted greedy) and a cached forward: the target's own paths."""
        prompt = self.prompts[1]
        with torch.no_grad():
            plain = self.target.generate(**self._call(prompt, 8, GREEDY, None)).tolist()
        return plain, self.stock(prompt, 8), self._cached_forward(prompt)

    @torch.no_grad()
    def _cached_forward(self, prompt):
        """Logits of a prefill then one cached step: exercises the target's own KV-cache path."""
        from viasd_adapt.routing.runner import cache_kwarg_name

        if self.encoder_decoder:
            source = {k: v for k, v in prompt.items() if k != "decoder_input_ids"}
            start = self.target.generation_config.decoder_start_token_id
            first = self.target(**source, decoder_input_ids=torch.tensor([[start, 5]]), use_cache=True)
            cache = {cache_kwarg_name(self.target): first.past_key_values}
            step = self.target(**source, decoder_input_ids=torch.tensor([[7]]), use_cache=True, **cache)
        else:
            first = self.target(torch.tensor([list(prompt)]), use_cache=True)
            cache = {cache_kwarg_name(self.target): first.past_key_values}  # 5.24 renamed past_key_values to cache
            step = self.target(torch.tensor([[7]]), use_cache=True, **cache)
        return torch.cat([first.logits[0, -1:], step.logits[0, -1:]]).tolist()

    def scope(self, settings):
        from viasd_adapt.adapters import hf

        return hf.tiered(self.target, context=viasd_adapt.context(self.target, mask=self.mask, settings=settings))

    def generate_in_scope(self, prompt, n):
        """A plain ``generate(assistant_model=...)`` call, as a user makes inside a scope."""
        with torch.no_grad():
            return self._new_tokens(prompt, self.target.generate(assistant_model=self.pair.drafter,
                                                                 **self._call(prompt, n, GREEDY, None)))

    def assert_pristine(self) -> None:
        from viasd_adapt.adapters import hf

        target = self.target
        assert "generate" not in target.__dict__ and "_get_candidate_generator" not in target.__dict__
        assert target.generate.__func__ is type(target).generate
        assert target._get_candidate_generator.__func__ is type(target)._get_candidate_generator
        assert not hf.is_patched(target)
        assert not target._forward_hooks and not target._forward_pre_hooks


# ============================================================================== PEARL


@dataclass
class PearlDriver(Driver):
    """``pearl_generate`` (drafter and target on two threads: the default on a CPU)."""

    name: str = "pearl"
    parallel: bool | str = "auto"

    def generate(self, prompt, n, settings, *, sampling=GREEDY, seed=0, mask=DEFAULT, plugins=(), eos=None,
                 drafter=DEFAULT, variant=None) -> Generation:
        from viasd_adapt.adapters.pearl import pearl_generate

        mask = self.mask if mask is DEFAULT else mask
        drafter = self.pair.drafter if drafter is DEFAULT else drafter
        out = pearl_generate(self.target, drafter, prompt, n,
                             context=viasd_adapt.context(self.target,
                                                         settings=settings, mask=mask,
                                                         plugins=plugins), sampling=sampling,
                             seed=seed, eos_token_id=eos, parallel=self.parallel)
        return Generation(out.tokens, out.tiers, out.metrics)

    def snapshot(self):
        return torch.get_num_threads()

    def assert_pristine(self) -> None:
        assert not [t.name for t in threading.enumerate() if t.name.startswith("pearl-")]


# ============================================================================== EAGLE


class _EosTokenizer:
    """Stands in for eagle's tokenizer; eagenerate only reads ``eos_token_id``."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id


@dataclass
class EagleDriver(Driver):
    """``eagle.generate`` on an EaModel: the target is the base model, the drafter EAGLE's head.

    ``variant`` picks the lossless strategy (``route`` or ``cascade``); without an EOS the
    generation goes on past eagle's EOS, as greedy decoding would.
    """

    ea_model: Any = None
    stock_target: nn.Module | None = None  # the same weights loaded by transformers (the reference)
    name: str = "eagle"
    first_drafted: int = 1  # eagle's prefill decides the first token

    def generate(self, prompt, n, settings, *, sampling=GREEDY, seed=0, mask=DEFAULT, plugins=(), eos=None,
                 drafter=DEFAULT, variant=None) -> Generation:
        from viasd_adapt.adapters import eagle

        mask = self.mask if mask is DEFAULT else mask
        options = eagle.EagleOptions(lossless_strategy=variant) if variant else None
        ids = prompt if isinstance(prompt, torch.Tensor) else torch.tensor([list(prompt)], dtype=torch.long)
        sampling_kwargs = {} if sampling.greedy else dict(temperature=sampling.temperature, top_p=sampling.top_p,
                                                           top_k=sampling.top_k or 0)
        torch.manual_seed(seed)
        random.seed(seed)  # eagle's own sampling acceptance (mode none) uses Python's random
        saved = self.ea_model.tokenizer
        if eos is not None:
            self.ea_model.tokenizer = _EosTokenizer(eos)
        try:
            out = eagle.generate(self.ea_model, ids, n,
                                 context=viasd_adapt.context(self.ea_model,
                                                             mask=mask, settings=settings,
                                                             plugins=plugins), options=options,
                                 stop_at_eos=eos is not None, **sampling_kwargs)
        finally:
            self.ea_model.tokenizer = saved
        return Generation(out.tokens, out.tiers, out.metrics)

    @property
    def target(self) -> nn.Module:
        return self.ea_model.base_model

    def reference(self, prompt, n):
        return greedy_reference(self.stock_target, prompt, n)

    def other_vocab_drafter(self):
        return None  # EAGLE's drafter is its head, checked against the base model at load time

    def next_probs(self, model, prompt, sampling):
        from eagle.model.utils import prepare_logits_processor

        processor = prepare_logits_processor(temperature=sampling.temperature, top_p=sampling.top_p,
                                             top_k=sampling.top_k or 0)

        @torch.no_grad()
        def probs(prefixes):
            rows = [model(input_ids=torch.tensor([list(prompt) + prefix])).logits[0, -1:].double() for prefix in prefixes]
            return torch.cat([processor(None, row).softmax(-1) for row in rows])

        return probs

    def snapshot(self):
        """eagle's swapped names, and stock ``eagenerate``'s output on a prompt."""
        from viasd_adapt.adapters.eagle import patches

        module = patches.ea_module()
        ids = torch.tensor([list(self.prompts[0])])
        stock = self.ea_model.eagenerate(ids, max_new_tokens=8)[0, ids.shape[1]:].tolist()
        self.ea_model.base_model.model.tree_mask = None  # eagenerate leaves its tree mask set
        return {name: getattr(module, name) for name in patches.PATCHED_NAMES}, stock

    def scope(self, settings):
        from viasd_adapt.adapters import eagle

        return eagle.tiered(self.ea_model,
                            context=viasd_adapt.context(self.ea_model, mask=self.mask, settings=settings))

    @contextlib.contextmanager
    def failing_drafter(self, at: int = 3) -> Iterator[list]:
        """EAGLE's drafter is its head, which eagle calls by method, not as a module: the head's
        embedding layer (its first step on every call) raises instead."""
        calls: list = []

        def hook(module, args):
            calls.append(1)
            if len(calls) == at:
                raise Boom("drafter exploded")

        handle = self.ea_model.ea_layer.embed_tokens.register_forward_pre_hook(hook)
        try:
            yield calls
        finally:
            handle.remove()

    def generate_in_scope(self, prompt, n):
        ids = torch.tensor([list(prompt)])
        return self.ea_model.eagenerate(ids, max_new_tokens=n)[0, ids.shape[1]:].tolist()

    def assert_pristine(self) -> None:
        from viasd_adapt.adapters import eagle

        assert not eagle.is_patched()
        assert self.ea_model.base_model.model.tree_mask is None
