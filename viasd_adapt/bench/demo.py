"""``viasd demo``: the shipped pair, one completion per tier mode coloured by tier, a small bench.

Budget: the defaults finish in about two minutes on 2 CPU cores. ``VIASD_DEMO_BUDGET=tiny``
(or ``--quick``) shrinks every size to a smoke test, for tests and CI. A few prompts cannot settle
a verdict, so the demo ends by saying that its verdict is a preview (undetermined wherever the
bootstrap over prompts does not separate the rows).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from viasd_adapt.prompts.chat import encode_prompt, uses_chat
from viasd_adapt.models.pair import FALLBACK_MASK_LABEL, LoadedPair, load_pair
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier

BUDGET_ENV_VAR = "VIASD_DEMO_BUDGET"
DEMO_MODES = ("none", "lenient", "lossless", "lossy", "audit")
TIER_LETTERS = {int(Tier.DRAFT): "D", int(Tier.SLIM): "S", int(Tier.FULL): "F"}


@dataclass(frozen=True)
class DemoBudget:
    """Sizes of the demo; ``tiny`` is a smoke test."""

    completion_tokens: int = 32
    bench_prompts: int = 2
    bench_tokens: int = 32
    bench_repeats: int = 2
    cost_repeats: int = 7
    task_prompts: int = 8


BUDGETS = {
    "default": DemoBudget(),
    "tiny": DemoBudget(completion_tokens=8, bench_prompts=1, bench_tokens=8, bench_repeats=1, cost_repeats=2, task_prompts=1),
}


def budget_from_env(quick: bool = False) -> DemoBudget:
    name = "tiny" if quick else os.environ.get(BUDGET_ENV_VAR, "default")
    from viasd_adapt.errors import ConfigError

    if name not in BUDGETS:
        raise ConfigError(f"{BUDGET_ENV_VAR}={name!r}; choose one of {', '.join(BUDGETS)}")
    return BUDGETS[name]


# The chat demo's question: not a Spec-Bench question (the bench that follows must not see it twice).
CHAT_DEMO_PROMPT = "Write a Python function that returns the n-th Fibonacci number, and explain it in one sentence."


def demo_prompt(chat_model: bool = False) -> str:
    """The completion the demo shows: a short held-out stdlib snippet for the project's code pairs,
    a question for a chat model (the same every run)."""
    if chat_model:
        return CHAT_DEMO_PROMPT
    from viasd_adapt.prompts.splits import demo_snippet

    return demo_snippet()


def tier_string(tiers: list[int]) -> str:
    """One letter per token (D draft accepted, S slim verifier, F full target), for logs and the
    README, where neither colour nor markers survive well."""
    return "".join(TIER_LETTERS.get(int(t), "?") for t in tiers)


def show_completions(pair: LoadedPair, settings: TierSettings, prompt: str, n_tokens: int, echo, colour: bool,
                     chat: str = "auto") -> dict:
    """Generates ``n_tokens`` after ``prompt`` in every mode through the HF adapter (the product
    path: ``target.generate(assistant_model=...)`` patched by the adapter) and prints each completion
    with its tiers (:mod:`viasd_adapt.bench.display`)."""
    from viasd_adapt.bench import display
    from viasd_adapt.frameworks import registry as frameworks

    chat_model = uses_chat(pair.tokenizer, chat)
    ids = encode_prompt(pair.tokenizer, prompt, chat)
    echo(click_style("prompt (chat template):" if chat_model else "prompt (held-out stdlib code):", colour))
    echo(prompt.rstrip("\n"))
    echo("")
    echo(display.legend(colour) + ("" if colour else "   (tiers line: D draft, S slim, F full)"))
    results = {}
    for mode in DEMO_MODES:
        sample = frameworks.run("hf", pair, RunRequest.tiered(ids, n_tokens, settings.with_(mode=mode), stop_at_eos=False))
        tiers = sample.tiers
        echo("")
        echo(click_style(f"--- {mode} ---", colour) + "  " + display.metrics_summary(sample.metrics))
        echo(display.render_tiers(display.token_pieces(pair.tokenizer, sample.tokens), tiers, colour))
        echo(f"tiers: {tier_string(tiers)}")
        results[mode] = {"tokens": sample.tokens, "tiers": tiers}
    return results


def click_style(text: str, colour: bool, **kwargs) -> str:
    if not colour:
        return text
    import click

    return click.style(text, bold=True, **kwargs)


def default_frameworks(has_eagle_head: bool) -> str:
    """hf and pearl, plus eagle when the pair ships an EAGLE head and eagle-llm is installed."""
    from viasd_adapt.frameworks import registry as frameworks

    eagle = has_eagle_head and frameworks.get("eagle").unavailable() is None
    return "hf,pearl,eagle" if eagle else "hf,pearl"


def run_demo(
    pair: str | None = None,
    budget: DemoBudget | None = None,
    echo: Callable[[str], None] = print,
    colour: bool = False,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    frameworks: str | None = None,
    chat: str = "auto",
) -> dict:
    """The whole demo; returns ``{"completions": ..., "bench": <bench JSON>}``. A pair whose tokenizer
    has a chat template (``chat``) is shown a question and benched on Spec-Bench (one question per task)."""
    from viasd_adapt.bench.session import BenchConfig, quiet_transformers, run_bench_session, set_threads
    from viasd_adapt.models.registry import demo_pair_paths, resolve_pair

    budget = budget or budget_from_env()
    set_threads()
    quiet_transformers()
    paths = resolve_pair(pair) if pair else demo_pair_paths()
    echo(f"pair: {paths.name} ({paths.source}) at {paths.root}")
    if paths.mask is None:
        echo(click_style(f"no mask.json shipped with this pair: using the {FALLBACK_MASK_LABEL}", colour, fg="red"))
    if frameworks is None:
        frameworks = default_frameworks(paths.eagle_head is not None)
    from viasd_adapt.config.resolve import resolve_settings

    spec = resolve_settings(pair_mask=paths.mask)  # reads the pair's tuned.json once, for the completions and the bench
    mask_path, settings = spec.mask_path, spec.settings
    pair = load_pair(paths.target, paths.draft, mask_path, device="auto", eagle_head=paths.eagle_head, read_masks=spec.masks)
    mask = pair.mask
    echo(f"slim verifier skips layers {list(mask.mask.skipped)} of {mask.mask.num_layers} "
         f"(s1 = {mask.mask.first_skipped}; {mask.source})")
    chat_model = uses_chat(pair.tokenizer, chat)
    completions = show_completions(pair, settings, demo_prompt(chat_model), budget.completion_tokens, echo, colour, chat)
    echo("")
    prompts = "Spec-Bench questions (1 per task)" if chat_model else f"{budget.bench_prompts} held-out prompts"
    echo(click_style(f"small bench: {prompts} x {budget.bench_tokens} tokens x {budget.bench_repeats} repeats", colour))
    config = BenchConfig(
        paths.target, paths.draft, mask_path=mask_path, num_prompts=budget.bench_prompts,
        prompts_file="spec-bench" if chat_model else None, per_category=1 if chat_model else None, chat=chat,
        max_new_tokens=budget.bench_tokens, repeats=budget.bench_repeats, frameworks=frameworks, json_path=json_path,
        plot_path=plot_path, label=f"viasd demo ({paths.name} pair)", cost_repeats=budget.cost_repeats,
        task_prompts=budget.task_prompts,
    )
    data = run_bench_session(config, echo=echo, pair=pair, tuned=spec.tuned)
    preview = preview_line(data["run"].get("verdict") or [], data["run"].get("prompts") or budget.bench_prompts)
    echo(click_style(preview, colour))
    return {"completions": completions, "bench": data, "preview": preview}


def preview_line(verdict: list[str], prompts: int) -> str:
    """What the demo's small bench can and cannot say: on a few prompts the verdict above is a
    preview, undetermined wherever its bootstrap over prompts does not separate the rows
    (:mod:`viasd_adapt.bench.uncertainty`); ``viasd bench`` on Spec-Bench gives one that holds."""
    from viasd_adapt.bench.uncertainty import prompts_words

    undetermined = [line.split(":", 1)[0] for line in verdict if "undetermined at" in line.lower()]
    state = f"undetermined for {', '.join(undetermined)}" if undetermined else "determined for every framework"
    return (f"preview on {prompts_words(prompts)}: {state}. For a verdict that holds, run "
            "`viasd bench --prompts spec-bench` (more prompts, the same rows).")


__all__ = ["BUDGETS", "DemoBudget", "budget_from_env", "preview_line", "run_demo", "tier_string"]
