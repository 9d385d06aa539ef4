"""The registry of benchmark rows: one entry per framework, one runner per (framework, mode).

A *row runner* generates one completion: ``runner(prompt_ids, max_new_tokens, seed) ->
RowSample``. The bench times it, counts its forward passes from the outside
(:mod:`viasd_adapt.bench.measure`) and aggregates. Adding a framework row to ``viasd bench`` is one
:func:`register_framework` call with a factory ``make_runner(ctx, mode) -> runner``.

Every runner generates exactly ``max_new_tokens`` tokens: EOS does not stop a benchmark
generation, so that all rows do the same amount of work and agreement is compared position by
position over the same length.

Modes of a row: ``none`` (the framework without the tier), ``lossless``, ``lossy``, ``audit``, and,
for frameworks that can also run with viasd-adapt completely uninstalled, ``plain``; the ``none``
vs. ``plain`` pair measures the overhead of an installed but switched-off tier.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Callable

import torch

from viasd_adapt.bench.context import BenchContext
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.settings import Mode

AR = "ar"
TIER_MODES = ("none", "lossless", "lossy", "audit")


@dataclass
class RowSample:
    """One generation of one row. ``metrics`` is None for rows without a verifier (``ar``) or
    frameworks that keep no tier statistics."""

    tokens: list[int]
    metrics: TierMetrics | None = None
    extra_bytes: int = 0  # buffers outside HF cache objects (EAGLE's pre-allocated KV cache)


RowRunner = Callable[[list[int], int, int], RowSample]


@dataclass(frozen=True)
class Framework:
    """A framework the bench can run.

    Attributes:
        name: the ``--frameworks`` name and the JSON ``framework`` field.
        make_runner: ``(ctx, mode) -> RowRunner``; ``mode`` is one of :data:`TIER_MODES` or ``plain``.
        description: one line for the report (which code path the rows go through).
        unavailable: ``ctx -> reason or None``; a framework whose module has not landed, or that
            needs an artifact the user did not give, is skipped with this reason.
        has_plain: whether a ``plain`` row (framework without viasd-adapt at all) exists.
        bound_kind: how :mod:`viasd_adapt.bench.costs` models the row: ``"sequential"`` (draft,
            then verify), ``"overlapped"`` (drafting runs concurrently with verification, PEARL) or
            ``"none"`` (the per-forward costs do not describe the framework, e.g. EAGLE's tree).

    A runner may carry an attribute ``metered``: ``[(module, role, name), ...]`` of models it runs
    that are not the context's target/drafter (role "full" or "draft"); the bench hooks them too.
    """

    name: str
    make_runner: Callable[[BenchContext, str], RowRunner]
    description: Callable[[BenchContext], str]
    unavailable: Callable[[BenchContext], str | None] = lambda ctx: None
    has_plain: Callable[[BenchContext], bool] = lambda ctx: False
    bound_kind: Callable[[BenchContext], str] = lambda ctx: "sequential"


FRAMEWORKS: dict[str, Framework] = {}


def register_framework(framework: Framework) -> Framework:
    """Adds (or replaces) a framework entry; returns it so it can be used as a value."""
    FRAMEWORKS[framework.name] = framework
    return framework


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# ---------------------------------------------------------------------------- autoregressive


def _generation_config(ctx: BenchContext, max_new_tokens: int, **extra):
    """A GenerationConfig that never stops at EOS and samples exactly like ``ctx.sampling``."""
    from transformers import GenerationConfig

    pad = getattr(ctx.target.generation_config, "pad_token_id", None)
    if pad is None:
        pad = 0
    sampling = ctx.sampling
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=pad)
    if sampling.greedy:
        kwargs.update(do_sample=False)
    else:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p)
    kwargs.update(extra)
    return GenerationConfig(**kwargs)


def make_ar_runner(ctx: BenchContext) -> RowRunner:
    """Autoregressive decoding of the target with HF ``generate`` (the user's real baseline)."""

    def run(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        torch.manual_seed(seed)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=ctx.device)
        with torch.no_grad():
            out = ctx.target.generate(ids, generation_config=_generation_config(ctx, max_new_tokens))
        return RowSample(out[0, len(prompt_ids):].tolist())

    return run


# ---------------------------------------------------------------------------- our engine


def make_engine_runner(ctx: BenchContext, mode: str, framework: str) -> RowRunner:
    """Classic SD through :mod:`viasd_adapt.engine`: ModelDrafter + TieredVerifier +
    speculative_generate (mode ``none`` is the untiered SD loop)."""
    from viasd_adapt.engine import ModelDrafter, TieredVerifier, speculative_generate

    settings = ctx.settings.with_(mode=Mode.parse(mode))

    def run(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        verifier = TieredVerifier(
            ctx.target, settings, ctx.sampling, slim=ctx.slim if settings.mode is not Mode.NONE else None,
            framework=framework,
        )
        out = speculative_generate(ModelDrafter(ctx.draft, ctx.sampling), verifier, prompt_ids, max_new_tokens, generator=generator)
        return RowSample(out.tokens, out.metrics)

    return run


register_framework(
    Framework(
        name="engine",
        make_runner=lambda ctx, mode: make_engine_runner(ctx, mode, "engine"),
        description=lambda ctx: "classic SD through viasd_adapt.engine (the loop the hf lossy/audit modes run); "
        "separates the tier's effect from the difference between that loop and transformers' own",
    )
)


# ---------------------------------------------------------------------------- hf


HF_ADAPTER = "viasd_adapt.adapters.hf"


def _hf_runner(ctx: BenchContext, mode: str) -> RowRunner:
    if module_available(HF_ADAPTER):
        from viasd_adapt.bench import hf_rows

        return hf_rows.make_runner(ctx, mode)
    return make_engine_runner(ctx, mode, "hf")


def _hf_description(ctx: BenchContext) -> str:
    if module_available(HF_ADAPTER):
        return "HF assisted generation: target.generate(assistant_model=draft), patched by viasd_adapt.adapters.hf"
    return "classic SD through viasd_adapt.engine (ModelDrafter + TieredVerifier); adapters/hf.py not present"


register_framework(
    Framework(
        name="hf",
        make_runner=_hf_runner,
        description=_hf_description,
        has_plain=lambda ctx: module_available(HF_ADAPTER),
    )
)


# ---------------------------------------------------------------------------- pearl


PEARL_ADAPTER = "viasd_adapt.adapters.pearl"


def _pearl_runner(ctx: BenchContext, mode: str) -> RowRunner:
    from viasd_adapt.bench import pearl_rows

    return pearl_rows.make_runner(ctx, mode)


register_framework(
    Framework(
        name="pearl",
        make_runner=_pearl_runner,
        description=lambda ctx: "PEARL (viasd_adapt.adapters.pearl.pearl_generate, parallel drafter/target threads)",
        unavailable=lambda ctx: None if module_available(PEARL_ADAPTER) else "adapters/pearl.py has not landed",
        bound_kind=lambda ctx: "overlapped",
    )
)


# ---------------------------------------------------------------------------- eagle


EAGLE_ADAPTER = "viasd_adapt.adapters.eagle"


def _eagle_unavailable(ctx: BenchContext) -> str | None:
    if not module_available(EAGLE_ADAPTER):
        return "adapters/eagle.py has not landed"
    if not ctx.eagle_head:
        return "needs --eagle-head PATH"
    return None


def _eagle_runner(ctx: BenchContext, mode: str) -> RowRunner:
    from viasd_adapt.bench import eagle_rows

    return eagle_rows.make_runner(ctx, mode)


register_framework(
    Framework(
        name="eagle",
        make_runner=_eagle_runner,
        description=lambda ctx: "EAGLE (eagle-llm EaModel.eagenerate through viasd_adapt.adapters.eagle; its own base-model copy)",
        unavailable=_eagle_unavailable,
        has_plain=lambda ctx: True,
        bound_kind=lambda ctx: "none",
    )
)
