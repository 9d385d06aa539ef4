"""``viasd models build``: tokenizer, target and drafter trained on stdlib code, plus a report.

The output is an ordinary pair of Hugging Face checkpoints (safetensors in fp16, config,
tokenizer files in each model directory), so everything downstream loads them through
``from_pretrained`` exactly as it would load a Llama-2 or Qwen checkpoint.

Weights are rounded to fp16 before evaluation, so ``build_report.json`` describes the weights on
disk, not a slightly better fp32 version of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

import tokenizers
import torch
import transformers

from viasd_adapt.config.build_report import BUILD_REPORT_FILENAME, BuildReport, PairBuildReport
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import follow_umask, make_folder
from viasd_adapt.training import corpus, evaluate
from viasd_adapt.training.layer_skip import random_mask
from viasd_adapt.training.presets import Preset, get_preset
from viasd_adapt.models.registry import cache_dir
from viasd_adapt.training.tokenizer import train_tokenizer
from viasd_adapt.training.train import chunk, llama_config, new_model, token_stream, train_model

# CPU threads used for building, by default. One thread, because (a) a fixed count keeps
# floating-point reductions, hence the weights, identical on machines with different core counts,
# and (b) on a shared machine two OpenMP threads that keep being descheduled wait on each other at
# every barrier: under load we saw a 2-thread build go from 1.3 s to over 20 s per step.
DEFAULT_THREADS = 1


def _stable_order_key(source: corpus.SourceFile) -> str:
    return hashlib.sha256(source.relative_path.encode("utf-8")).hexdigest()


def _training_texts(preset: Preset) -> tuple[list[str], list[corpus.SourceFile]]:
    """The train split, or a fixed pseudo-random subset of it when the preset caps its size."""
    train_files, _ = corpus.split_files()
    if preset.max_train_chars is None:
        return [f.read() for f in train_files], train_files
    texts, used, total = [], [], 0
    for source in sorted(train_files, key=_stable_order_key):
        if total >= preset.max_train_chars:
            break
        text = source.read()
        texts.append(text)
        used.append(source)
        total += len(text)
    return texts, used


def _evaluation_rows(rows: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` held-out rows spread evenly over the held-out files."""
    if rows.size(0) <= count:
        return rows
    picks = torch.linspace(0, rows.size(0) - 1, count).round().long()
    return rows[picks]


def _parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _copy_embedding(source: torch.nn.Module, destination: torch.nn.Module) -> None:
    """Start ``destination``'s (tied) token embedding from ``source``'s trained one.

    A deep, narrow target otherwise sits on the unigram plateau for its first ~100 steps, and
    within the demo budget ended up worse than the 1-layer drafter (held-out loss 4.23 vs 3.61).
    """
    source_embedding = source.get_input_embeddings().weight
    destination_embedding = destination.get_input_embeddings().weight
    if source_embedding.shape != destination_embedding.shape:
        raise ConfigError(
            f"cannot start the target's embedding from the drafter's: shapes {tuple(source_embedding.shape)} "
            f"and {tuple(destination_embedding.shape)} differ (use the same hidden size)"
        )
    with torch.no_grad():
        destination_embedding.copy_(source_embedding)


def _round_to_fp16(model: torch.nn.Module) -> None:
    """Make the fp32 weights exactly what the fp16 files will hold."""
    model.half().float()


def start_build(preset_name: str, out_dir: str | Path | None) -> tuple[Path, Path]:
    """``(pair folder, staging folder)`` of a build of ``preset_name`` under ``out_dir`` (default: the
    cache). The destination is checked before any training, and the build writes into a hidden
    staging folder beside it that :func:`install_build` renames into place, so an interrupted build
    leaves nothing half-written where a pair is read."""
    root = Path(out_dir).expanduser() if out_dir is not None else cache_dir()
    pair_dir = root / preset_name
    check_build_destination(pair_dir, preset_name)
    try:
        make_folder(root, "folder of pairs")
        staging_dir = Path(tempfile.mkdtemp(prefix=f".{preset_name}-building-", dir=root))
    except OSError as err:
        raise ViasdError(f"cannot write the pair under {root}: {err.strerror or err}") from None
    return pair_dir, staging_dir


def build_pair(
    preset: str | Preset,
    out_dir: str | Path | None = None,
    seed: int = 0,
    progress: bool = True,
    threads: int = DEFAULT_THREADS,
) -> Path:
    """Train and write the pair ``<out_dir>/<preset>/{tokenizer,target,draft,build_report.json}``.

    ``out_dir`` defaults to the cache (``$VIASD_CACHE`` or ``~/.cache/viasd-adapt``). The pair
    is written to a temporary directory first and moved into place at the end, so an interrupted
    build never leaves a half-written pair behind. The same seed and ``threads`` on the same
    software versions give identical weights. Returns the pair directory.

    What already exists at ``<out_dir>/<preset>`` is never deleted wholesale (it may hold a
    searched ``mask.json``, a ``tuned.json``, an ``eagle_head/`` or the user's own files):

    * nothing there, or an empty directory: the new pair is moved into place;
    * an earlier build of the same preset (its ``build_report.json`` names the preset): only the
      build's own entries (:data:`BUILD_ENTRIES`) are replaced, each by an atomic rename, and every
      other entry is kept. A kept mask or head made for other weights is caught by its fingerprint
      check when it is loaded (the same seed and thread count rebuild identical weights);
    * anything else: :class:`ConfigError` before any training, and nothing is touched.

    The new directories get the usual permissions (0755 under umask 022), files 0644.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be an integer >= 1, got {threads!r}")
    preset = get_preset(preset) if isinstance(preset, str) else preset
    pair_dir, staging_dir = start_build(preset.name, out_dir)
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        report = _train_and_write(preset, seed, staging_dir, progress)
        report["build_seconds"] = round(time.perf_counter() - started, 1)
        PairBuildReport.model_validate(report).save(staging_dir / BUILD_REPORT_FILENAME)
        install_build(staging_dir, pair_dir, preset.name)
    finally:
        torch.set_num_threads(previous_threads)
        shutil.rmtree(staging_dir, ignore_errors=True)  # only left over if the build failed
    return pair_dir


# What a build writes into the pair directory; everything else there belongs to someone else.
BUILD_ENTRIES = ("tokenizer", "target", "draft", "build_report.json")


def _built_preset(pair_dir: Path) -> str | None:
    """The preset name an earlier build recorded in ``pair_dir``, or None (no readable report naming one)."""
    try:
        report = BuildReport.load(pair_dir / BUILD_REPORT_FILENAME)
    except ViasdError:
        return None
    return report.preset.name if report.preset is not None else None


def check_build_destination(pair_dir: Path, preset_name: str) -> None:
    """Refuses, before any training, a destination that is not empty and not an earlier build of
    ``preset_name`` (see :func:`build_pair`)."""
    if not pair_dir.exists() and not pair_dir.is_symlink():
        return
    if not pair_dir.is_dir():
        raise ConfigError(f"{pair_dir} exists and is not a directory; nothing was changed (choose another --out)")
    try:
        empty = not any(pair_dir.iterdir())
    except OSError as err:
        raise ViasdError(f"cannot read {pair_dir}: {err.strerror or err}") from None
    if not empty and _built_preset(pair_dir) != preset_name:
        raise ConfigError(
            f"{pair_dir} already exists and is not an earlier build of the {preset_name!r} recipe (no "
            "build_report.json naming it); nothing was deleted. Choose another --out, or move it away"
        )


def install_build(staging_dir: Path, pair_dir: Path, preset_name: str,
                  entries: tuple[str, ...] = BUILD_ENTRIES) -> list[str]:
    """Moves a finished build from ``staging_dir`` to ``pair_dir`` (same file system).

    ``entries`` are the names the build owns (a distilled drafter's build owns others than a
    stdlib pair's); those missing from ``staging_dir`` are left alone. Returns the names of entries
    of an earlier build's directory that were kept (masks, heads, the user's files). On a failure
    midway, the earlier entries already moved aside are put back.
    """
    follow_umask(staging_dir)  # mkdtemp makes it 0700, safetensors its weights 0600
    check_build_destination(pair_dir, preset_name)
    if pair_dir.is_dir() and not any(pair_dir.iterdir()):
        pair_dir.rmdir()
    if not pair_dir.exists():
        staging_dir.rename(pair_dir)
        return []
    aside = Path(tempfile.mkdtemp(prefix=f".{pair_dir.name}-replaced-", dir=pair_dir.parent))
    moved: list[str] = []
    try:
        for name in entries:
            if not (staging_dir / name).exists():
                continue
            if (pair_dir / name).exists() or (pair_dir / name).is_symlink():
                (pair_dir / name).rename(aside / name)
                moved.append(name)
            (staging_dir / name).rename(pair_dir / name)
    except OSError as err:
        for name in moved:
            with contextlib.suppress(OSError):
                if (pair_dir / name).exists():
                    shutil.rmtree(pair_dir / name) if (pair_dir / name).is_dir() else (pair_dir / name).unlink()
                (aside / name).rename(pair_dir / name)
        raise ViasdError(f"cannot move the new pair into {pair_dir}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    shutil.rmtree(staging_dir, ignore_errors=True)  # emptied
    return sorted(p.name for p in pair_dir.iterdir() if p.name not in entries)



def _train_and_write(preset: Preset, seed: int, out: Path, progress: bool) -> dict:
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    texts, train_files = _training_texts(preset)
    tokenizer = train_tokenizer(texts, preset.vocab_size)
    train_rows = chunk(token_stream(texts, tokenizer), preset.seq_len)
    heldout_rows = _evaluation_rows(chunk(token_stream(corpus.heldout_text(), tokenizer), preset.seq_len), preset.eval_sequences)
    timings["tokenizer_and_data"] = time.perf_counter() - clock

    clock = time.perf_counter()
    draft = new_model(llama_config(preset.draft, tokenizer, preset.seq_len), seed + 1)
    draft_losses = train_model(draft, train_rows, preset.draft_training, seed + 1, "draft", progress)
    timings["train_draft"] = time.perf_counter() - clock

    clock = time.perf_counter()
    target = new_model(llama_config(preset.target, tokenizer, preset.seq_len), seed)
    if preset.target_embedding_from_draft:
        _copy_embedding(draft, target)
    target_losses = train_model(target, train_rows, preset.target_training, seed, "target", progress)
    timings["train_target"] = time.perf_counter() - clock

    clock = time.perf_counter()
    _round_to_fp16(target)
    _round_to_fp16(draft)
    report = _evaluate_pair(preset, seed, tokenizer, target, draft, heldout_rows)
    timings["evaluate"] = time.perf_counter() - clock

    tokenizer.save_pretrained(out / "tokenizer")
    for name, model in (("target", target), ("draft", draft)):
        model.half().save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)

    report.update(
        preset=preset.to_dict(),
        seed=seed,
        corpus={
            "python": platform.python_version(),
            "train_files": len(train_files),
            "train_tokens": int(train_rows.numel()),
            "heldout_files": len(corpus.split_files()[1]),
            "fingerprint": corpus.corpus_fingerprint(train_files),
        },
        final_train_loss={
            "target": sum(target_losses[-20:]) / len(target_losses[-20:]),
            "draft": sum(draft_losses[-20:]) / len(draft_losses[-20:]),
        },
        versions={"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        threads=torch.get_num_threads(),
        timings_seconds={key: round(value, 1) for key, value in timings.items()},
    )
    return report


def _evaluate_pair(preset: Preset, seed: int, tokenizer, target, draft, rows: torch.Tensor) -> dict:
    """Losses, argmax agreement with the target (drafter and random masks) and acceptance."""
    num_layers = target.config.num_hidden_layers
    target_argmax = evaluate.argmax_predictions(target, rows)
    mask_rng = random.Random(seed)
    masks = []
    for _ in range(preset.report_masks):
        skip = random_mask(num_layers, preset.mask_ratio, mask_rng)
        masks.append(
            {
                "skipped_layers": skip,
                "heldout_loss": evaluate.heldout_loss(target, rows, skip),
                "argmax_agreement_with_target": evaluate.agreement(evaluate.argmax_predictions(target, rows, skip), target_argmax),
            }
        )
    prompts = corpus.heldout_prompts(preset.eval_prompts, seed=seed)
    acceptance = evaluate.drafter_acceptance(
        target, draft, tokenizer, prompts, preset.eval_new_tokens, preset.speculation_length
    )
    return {
        "parameters": {"target": _parameter_count(target), "draft": _parameter_count(draft)},
        "heldout_tokens": int(rows.numel()),
        "heldout_loss": {"target": evaluate.heldout_loss(target, rows), "draft": evaluate.heldout_loss(draft, rows)},
        "argmax_agreement_with_target": {"draft": evaluate.agreement(evaluate.argmax_predictions(draft, rows), target_argmax)},
        "random_masks": {"ratio": preset.mask_ratio, "layer_0_kept": True, "masks": masks},
        "drafter_acceptance": acceptance,
    }
