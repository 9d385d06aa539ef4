"""``viasd demo``: the shipped pair, one completion per tier mode coloured by tier, a small bench.

Budget: the defaults finish in about two minutes on 2 CPU cores. ``VIASD_DEMO_BUDGET=tiny``
(or ``--quick``) shrinks every size to a smoke test, for tests and CI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from viasd_adapt.bench.context import FALLBACK_MASK_LABEL, BenchContext, build_context
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import Tier

BUDGET_ENV_VAR = "VIASD_DEMO_BUDGET"
DEMO_MODES = ("none", "lossless", "lossy", "audit")
TIER_STYLE = {int(Tier.DRAFT): ("green", "D"), int(Tier.SLIM): ("yellow", "S"), int(Tier.FULL): ("magenta", "F")}


@dataclass(frozen=True)
class DemoBudget:
    """Sizes of the demo; ``tiny`` is a smoke test."""

    completion_tokens: int = 48
    bench_prompts: int = 3
    bench_tokens: int = 32
    bench_repeats: int = 2
    cost_repeats: int = 5


BUDGETS = {
    "default": DemoBudget(),
    "tiny": DemoBudget(completion_tokens=8, bench_prompts=1, bench_tokens=8, bench_repeats=1, cost_repeats=2),
}


def budget_from_env(quick: bool = False) -> DemoBudget:
    name = "tiny" if quick else os.environ.get(BUDGET_ENV_VAR, "default")
    from viasd_adapt.errors import ConfigError

    if name not in BUDGETS:
        raise ConfigError(f"{BUDGET_ENV_VAR}={name!r}; choose one of {', '.join(BUDGETS)}")
    return BUDGETS[name]


def demo_prompt() -> str:
    """A short held-out stdlib snippet (the same every run)."""
    from viasd_adapt.models.corpus import heldout_prompts

    return heldout_prompts(1, seed=7, min_chars=120, max_chars=240)[0]


def render_tiers(pieces: list[str], tiers: list[int], style: Callable[..., str]) -> str:
    """The completion with each token coloured by the tier that committed it."""
    out = []
    for piece, tier in zip(pieces, tiers):
        colour, _ = TIER_STYLE.get(int(tier), ("white", "?"))
        out.append(style(piece, fg=colour))
    return "".join(out)


def tier_string(tiers: list[int]) -> str:
    """One letter per token (D draft accepted, S slim, F full), readable without colour."""
    return "".join(TIER_STYLE.get(int(t), ("", "?"))[1] for t in tiers)


def legend(style: Callable[..., str]) -> str:
    names = {int(Tier.DRAFT): "drafter token accepted", int(Tier.SLIM): "slim verifier", int(Tier.FULL): "full target"}
    return "   ".join(style(f"{letter} = {names[t]}", fg=colour) for t, (colour, letter) in TIER_STYLE.items())


def _token_pieces(tokenizer, tokens: list[int]) -> list[str]:
    """Per-token text whose concatenation is the decoded completion (decode prefixes, diff them)."""
    pieces, previous = [], ""
    for i in range(len(tokens)):
        text = tokenizer.decode(tokens[: i + 1])
        pieces.append(text[len(previous):] if text.startswith(previous) else tokenizer.decode([tokens[i]]))
        previous = text
    return pieces


def show_completions(ctx: BenchContext, prompt: str, n_tokens: int, echo, style) -> dict:
    """Generates ``n_tokens`` after ``prompt`` in every mode through the hf rows and prints them."""
    from viasd_adapt.bench.rows import FRAMEWORKS

    ids = ctx.tokenizer(prompt).input_ids
    echo(style("prompt:", bold=True))
    echo(prompt.rstrip("\n"))
    echo("")
    echo(legend(style))
    results = {}
    for mode in DEMO_MODES:
        sample = FRAMEWORKS["hf"].make_runner(ctx, mode)(ids, n_tokens, 0)
        tiers = sample.metrics.token_tiers[: len(sample.tokens)] if sample.metrics else []
        m = sample.metrics
        echo("")
        summary = (
            f"rejection {m.rejection_rate:.2f}, full passes {m.full_passes}, slim passes {m.slim_passes}, "
            f"tokens by tier D/S/F {m.accepted}/{m.slim_regenerated}/{m.escalated}"
        ) if m else ""
        echo(style(f"--- {mode} ---", bold=True) + f"  {summary}")
        echo(render_tiers(_token_pieces(ctx.tokenizer, sample.tokens), tiers, style))
        echo(f"tiers: {tier_string(tiers)}")
        results[mode] = {"tokens": sample.tokens, "tiers": tiers}
    return results


def run_demo(
    pair: str | None = None,
    budget: DemoBudget | None = None,
    echo: Callable[[str], None] = print,
    style: Callable[..., str] = lambda text, **_: text,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    frameworks: str = "hf,pearl",
) -> dict:
    """The whole demo; returns ``{"completions": ..., "bench": <bench JSON>}``."""
    from viasd_adapt.bench.session import run_bench_session, set_threads
    from viasd_adapt.models.registry import demo_pair_paths, resolve_pair

    budget = budget or budget_from_env()
    set_threads()
    paths = resolve_pair(pair) if pair else demo_pair_paths()
    echo(f"pair: {paths.name} ({paths.source}) at {paths.root}")
    if paths.mask is None:
        echo(style(f"no mask.json shipped with this pair: using the {FALLBACK_MASK_LABEL}", fg="red", bold=True))
    ctx = build_context(paths.target, paths.draft, TierSettings(), SamplingConfig(), mask_path=paths.mask, device="auto")
    ctx_mask = ctx.mask
    echo(f"slim verifier skips layers {list(ctx_mask.mask.skipped)} of {ctx_mask.mask.num_layers} ({ctx_mask.source})")
    completions = show_completions(ctx, demo_prompt(), budget.completion_tokens, echo, style)
    echo("")
    echo(style(f"small bench: {budget.bench_prompts} held-out prompts x {budget.bench_tokens} tokens x {budget.bench_repeats} repeats", bold=True))
    data = run_bench_session(
        paths.target, paths.draft, num_prompts=budget.bench_prompts, max_new_tokens=budget.bench_tokens,
        repeats=budget.bench_repeats, frameworks=frameworks, json_path=json_path, plot_path=plot_path,
        echo=echo, label=f"viasd demo ({paths.name} pair)", context=ctx, cost_repeats=budget.cost_repeats,
    )
    return {"completions": completions, "bench": data}


__all__ = ["BUDGETS", "DemoBudget", "budget_from_env", "render_tiers", "run_demo", "tier_string"]
