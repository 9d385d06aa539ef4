"""``viasd generate``: one completion from any framework, with each token's tier visible.

Frameworks are a registry, ``FRAMEWORKS`` (name -> runner). ``ar`` (plain target decoding) and
``hf`` (transformers assisted generation, patched by :mod:`viasd_adapt.adapters.hf`) live here.
Other adapters add themselves without editing this file: when a name in ``ADAPTER_MODULES`` is
asked for, its module is imported, and it either calls :func:`register_framework` at import time
or exposes a ``cli_runner(request) -> GenerateResult`` function. Heavy imports (torch,
transformers) happen inside runners only, so ``viasd --help`` stays fast and adapter modules can
import this one without cycles.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.settings import Mode, TierSettings

# ============================================================================ registry


@dataclass
class GenerateRequest:
    """Everything a runner needs; paths are already resolved (defaults: the shipped demo pair)."""

    framework: str
    target: Path
    draft: Path | None
    mask: Path | None
    eagle_head: Path | None
    settings: TierSettings
    prompt: str
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0


@dataclass
class GenerateResult:
    """What every runner returns: generated ids (prompt excluded), their tiers, the metrics."""

    tokens: list[int]
    tiers: list[int]
    metrics: Any  # viasd_adapt.metrics.TierMetrics
    tokenizer: Any = None
    prompt_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Runner = Callable[[GenerateRequest], GenerateResult]
FRAMEWORKS: dict[str, Runner] = {}
# Frameworks whose runner lives in an adapter module, imported only when asked for.
ADAPTER_MODULES = {"eagle": "viasd_adapt.adapters.eagle", "pearl": "viasd_adapt.adapters.pearl"}


def register_framework(name: str, runner: Runner) -> None:
    """Adds (or replaces) a framework of ``viasd generate``."""
    FRAMEWORKS[name] = runner


def get_runner(name: str) -> Runner:
    """The runner for ``name``, importing its adapter module on first use."""
    if name not in FRAMEWORKS and name in ADAPTER_MODULES:
        module = importlib.import_module(ADAPTER_MODULES[name])
        if name not in FRAMEWORKS and callable(getattr(module, "cli_runner", None)):
            register_framework(name, module.cli_runner)
    if name not in FRAMEWORKS:
        known = ", ".join(sorted(set(FRAMEWORKS) | set(ADAPTER_MODULES)))
        raise ConfigError(f"framework {name!r} has no `viasd generate` runner yet (known: {known})")
    return FRAMEWORKS[name]


# ============================================================================ shared helpers for runners


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as err:
        raise ViasdError(f"cannot load a tokenizer from {path}: {err}") from None


def load_model(path: Path):
    """A causal LM in float32 eval mode (the shipped pair is stored in fp16; CPUs want fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ViasdError(f"cannot load a model from {path}: {err}") from None
    return model.eval()


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    ids = tokenizer(prompt)["input_ids"]
    if not prompt or not ids:
        raise ConfigError("the prompt is empty: pass --prompt with some text")
    return list(ids)


def generation_kwargs(request: GenerateRequest) -> dict:
    """transformers sampling arguments: greedy at temperature 0; top-k off so --top-p means what it says."""
    if not request.do_sample:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": request.temperature, "top_p": request.top_p, "top_k": 0}


def _count_full_passes(model):
    """Counts forward calls of ``model`` itself; returns (counter list, hook handle)."""
    calls: list[bool] = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(module is model))
    return calls, handle


# ============================================================================ built-in runners


def run_ar(request: GenerateRequest) -> GenerateResult:
    """Plain autoregressive decoding with the target: every token is a full-verifier token."""
    import torch

    from viasd_adapt.metrics import TierMetrics
    from viasd_adapt.tiers import Tier

    tokenizer = load_tokenizer(request.target)
    target = load_model(request.target)
    prompt_ids = encode_prompt(tokenizer, request.prompt)
    torch.manual_seed(request.seed)
    calls, hook = _count_full_passes(target)
    try:
        out = target.generate(torch.tensor([prompt_ids]), max_new_tokens=request.max_new_tokens,
                              **generation_kwargs(request))
    finally:
        hook.remove()
    tokens = out[0, len(prompt_ids):].tolist()
    metrics = TierMetrics(cycles=len(tokens), full_passes=sum(calls), token_tiers=[int(Tier.FULL)] * len(tokens),
                          accepted_lengths=[1] * len(tokens))
    return GenerateResult(tokens, metrics.token_tiers[:], metrics, tokenizer, prompt_ids)


def run_hf(request: GenerateRequest) -> GenerateResult:
    """``target.generate(assistant_model=draft)`` inside :func:`viasd_adapt.adapters.hf.tiered`."""
    import torch

    from viasd_adapt.adapters import hf

    if request.draft is None:
        raise ConfigError("--framework hf needs --draft (the assistant model)")
    tokenizer = load_tokenizer(request.target)
    draft_tokenizer = load_tokenizer(request.draft) if (request.draft / "tokenizer_config.json").is_file() else None
    target, draft = load_model(request.target), load_model(request.draft)
    config = draft.generation_config  # classic SD: a constant block of gamma drafts, like the tier loop
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = request.settings.gamma, "constant"
    config.assistant_confidence_threshold = 0.0
    prompt_ids = encode_prompt(tokenizer, request.prompt)
    mask = request.mask if request.mode is not Mode.NONE else None
    torch.manual_seed(request.seed)
    with hf.tiered(target, mask=mask, settings=request.settings, tokenizer=tokenizer,
                   assistant_tokenizer=draft_tokenizer) as session:
        out = target.generate(torch.tensor([prompt_ids]), assistant_model=draft, max_new_tokens=request.max_new_tokens,
                              return_dict_in_generate=True, **generation_kwargs(request))
    if session.fallbacks:
        raise ViasdError(f"the hf adapter fell back to the stock path: {session.fallbacks[-1]}")
    tokens = out.sequences[0, len(prompt_ids):].tolist()
    metrics = out.viasd_metrics
    return GenerateResult(tokens, list(metrics.token_tiers), metrics, tokenizer, prompt_ids)


register_framework("ar", run_ar)
register_framework("hf", run_hf)


# ============================================================================ command


def _demo_pair():
    """The shipped demo pair, or None when it is not installed."""
    try:
        from viasd_adapt.models.registry import demo_pair_paths

        return demo_pair_paths()
    except ViasdError:
        return None


def build_request(framework: str, target: Path | None, draft: Path | None, mask: Path | None, eagle_head: Path | None,
                  mode: str | None, prompt: str, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                  gamma: int | None = None, alpha1: float | None = None, alpha2: float | None = None) -> GenerateRequest:
    """Validates the options and fills the defaults (demo pair, its mask, the mode)."""
    from viasd_adapt.settings import check_max_new_tokens

    check_max_new_tokens(max_new_tokens)
    if temperature < 0:
        raise ConfigError(f"--temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {top_p}")
    if mode is None:
        mode = "none" if framework == "ar" else "lossy"
    if framework == "ar" and Mode.parse(mode) is not Mode.NONE:
        raise ConfigError("--framework ar is plain target decoding: it has no tier (use --mode none)")
    demo = _demo_pair() if target is None else None
    if target is None:
        if demo is None:
            raise ViasdError("no --target given and the shipped demo pair is not installed; pass --target and --draft")
        target = demo.target
        draft = draft if draft is not None else demo.draft
        mask = mask if mask is not None else demo.mask
        eagle_head = eagle_head if eagle_head is not None else demo.eagle_head
    if framework != "ar" and draft is None and framework != "eagle":
        raise ConfigError(f"--framework {framework} needs --draft")
    changes = {k: v for k, v in dict(mode=mode, gamma=gamma, alpha1=alpha1, alpha2=alpha2).items() if v is not None}
    settings = TierSettings(**changes)
    if settings.mode is not Mode.NONE and mask is None:
        raise ConfigError(f"--mode {settings.mode.value} needs --mask (a mask.json searched for this target)")
    return GenerateRequest(framework, Path(target), Path(draft) if draft else None, Path(mask) if mask else None,
                           Path(eagle_head) if eagle_head else None, settings, prompt, max_new_tokens,
                           temperature, top_p, seed)


def result_json(request: GenerateRequest, result: GenerateResult, text: str, seconds: float) -> dict:
    return {
        "framework": request.framework,
        "mode": request.mode.value,
        "prompt": request.prompt,
        "prompt_ids": result.prompt_ids,
        "tokens": result.tokens,
        "tiers": result.tiers,
        "text": text,
        "metrics": result.metrics.to_dict(),
        "settings": request.settings.to_dict(),
        "sampling": {"temperature": request.temperature, "top_p": request.top_p, "seed": request.seed},
        "paths": {k: (str(v) if v else None) for k, v in
                  dict(target=request.target, draft=request.draft, mask=request.mask, eagle_head=request.eagle_head).items()},
        "seconds": seconds,
    }


_PATH = click.Path(exists=True, path_type=Path)


@click.command()
@click.option("--framework", type=click.Choice(sorted(set(FRAMEWORKS) | set(ADAPTER_MODULES))), default="hf",
              show_default=True, help="ar = plain target decoding; hf = transformers assisted generation.")
@click.option("--target", type=_PATH, default=None, help="Target model directory [default: the shipped demo pair].")
@click.option("--draft", type=_PATH, default=None, help="Drafter model directory [default: the demo pair's].")
@click.option("--eagle-head", type=_PATH, default=None, help="EAGLE head directory (--framework eagle).")
@click.option("--mask", type=_PATH, default=None, help="Routing mask artifact (mask.json) [default: the demo pair's].")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=None,
              help="Tier mode [default: lossy; none for --framework ar].")
@click.option("--prompt", required=True, help="Text to continue.")
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--gamma", type=int, default=None, help="Draft block length [default: TierSettings'].")
@click.option("--alpha1", type=float, default=None, help="Gate-1 tolerance [default: TierSettings'].")
@click.option("--alpha2", type=float, default=None, help="Gate-2 tolerance [default: TierSettings'].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write tokens, text and metrics here.")
@click.option("--color/--no-color", "colour", default=None, help="Colour by tier [default: when stdout is a terminal].")
def generate(framework, target, draft, eagle_head, mask, mode, prompt, max_new_tokens, temperature, top_p, seed,
             gamma, alpha1, alpha2, json_path, colour) -> None:
    """Generate a completion and show which tier committed each token."""
    from viasd_adapt.display import legend, metrics_summary, render_tiers, token_pieces

    request = build_request(framework, target, draft, mask, eagle_head, mode, prompt, max_new_tokens,
                            temperature, top_p, seed, gamma, alpha1, alpha2)
    runner = get_runner(framework)
    import torch

    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    start = time.perf_counter()
    result = runner(request)
    seconds = time.perf_counter() - start
    tokenizer = result.tokenizer or load_tokenizer(request.target)
    text = tokenizer.decode(result.tokens, skip_special_tokens=False)
    colour = sys.stdout.isatty() if colour is None else colour
    pieces = token_pieces(tokenizer, result.tokens)
    click.echo(f"[{request.framework} / {request.mode.value}] {len(result.tokens)} tokens in {seconds:.2f}s")
    click.echo(click.style(request.prompt, dim=True) if colour else request.prompt, nl=False, color=colour)
    click.echo(render_tiers(pieces, result.tiers, colour), color=colour)
    click.echo(legend(colour), color=colour)
    click.echo(metrics_summary(result.metrics))
    for note in result.notes:
        click.echo(f"note: {note}")
    if json_path is not None:
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(result_json(request, result, text, seconds), indent=2) + "\n")
        except OSError as err:
            raise ViasdError(f"cannot write {json_path}: {err.strerror or err}") from None
        click.echo(f"wrote {json_path}")
