"""Capacity-gap study: does the slim tier pay more when the drafter is much weaker than the target?

The paper claims VIA-SD's gain grows with the drafter-target capacity gap. This script trains
drafters of clearly different strength for the shipped demo target (same tokenizer, same corpus,
same recipe as the demo drafter), then, per drafter, measures Delta(u), how often tier 2 fires,
and tuned VIA-SD against tuned lenient acceptance at the default fidelity budget.

    python benchmarks/capacity_gap.py train            # a few CPU minutes per drafter, 1 thread
    python benchmarks/capacity_gap.py study --target-pair demo --json ... --plot ...
    python benchmarks/capacity_gap.py study --target-pair PATH/demo-ee --exits 6,8,10 --json ... --plot ...

Pairs are written to ``$VIASD_CACHE/capacity/<name>/`` (``target`` links to the shipped demo
target, ``draft`` is the new drafter), so each is an ordinary pair directory for ``--pair``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from viasd_adapt.training import corpus, evaluate
from viasd_adapt.training.presets import DEMO, ModelShape
from viasd_adapt.models.registry import cache_dir, demo_pair_paths
from viasd_adapt.training.train import chunk, llama_config, new_model, token_stream, train_model
from viasd_adapt.config.build_report import BuildReport
from viasd_adapt.io import json_text


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    shape: ModelShape


# Weakest to strongest; the shipped demo drafter (1 layer, d=160) sits between d128 and 2x160.
DRAFTERS = (
    DrafterSpec("d32x1", ModelShape(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=88)),
    DrafterSpec("d64x1", ModelShape(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=172)),
    DrafterSpec("d128x1", ModelShape(hidden_size=128, num_layers=1, num_heads=4, intermediate_size=344)),
    DrafterSpec("d160x2", ModelShape(hidden_size=160, num_layers=2, num_heads=5, intermediate_size=432)),
)


def study_root() -> Path:
    return cache_dir() / "capacity"


def _training_rows(tokenizer, heldout_only: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]:
    rows = None
    if not heldout_only:
        train_files, _ = corpus.split_files()
        rows = chunk(token_stream([f.read() for f in train_files], tokenizer), DEMO.seq_len)
    heldout = chunk(token_stream(corpus.heldout_text(), tokenizer), DEMO.seq_len)
    picks = torch.linspace(0, heldout.size(0) - 1, DEMO.eval_sequences).round().long()
    return rows, heldout[picks]


def train(names: list[str], seed: int, threads: int) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    demo = demo_pair_paths()
    tokenizer = AutoTokenizer.from_pretrained(str(demo.target))
    target = AutoModelForCausalLM.from_pretrained(str(demo.target), dtype=torch.float32).eval()
    rows, heldout = _training_rows(tokenizer)
    target_argmax = evaluate.argmax_predictions(target, heldout)
    target_loss = evaluate.heldout_loss(target, heldout)
    for spec in DRAFTERS:
        if names and spec.name not in names:
            continue
        out = study_root() / spec.name
        if (out / "draft" / "config.json").is_file():
            print(f"{spec.name}: already built at {out}")
            continue
        started = time.perf_counter()
        draft = new_model(llama_config(spec.shape, tokenizer, DEMO.seq_len), seed + 1)
        train_model(draft, rows, DEMO.draft_training, seed + 1, spec.name, progress=True)
        draft.half().float()  # evaluate what the fp16 files hold
        report = {
            "name": spec.name,
            "shape": spec.shape.__dict__,
            "parameters": sum(p.numel() for p in draft.parameters()),
            "seed": seed,
            "threads": threads,
            "train_seconds": round(time.perf_counter() - started, 1),
            "heldout_loss": {"draft": evaluate.heldout_loss(draft, heldout), "target": target_loss},
            "argmax_agreement_with_target": evaluate.agreement(evaluate.argmax_predictions(draft, heldout), target_argmax),
        }
        report["capacity_gap"] = report["heldout_loss"]["draft"] - target_loss
        staging = out.with_name(f".{spec.name}-building")
        staging.mkdir(parents=True, exist_ok=True)
        draft.half().save_pretrained(staging / "draft")
        tokenizer.save_pretrained(staging / "draft")
        link = staging / "target"
        if not link.exists():
            os.symlink(demo.target, link)
        BuildReport.from_json(report).save(staging / "build_report.json")
        staging.rename(out)
        print(json_text(report, indent=None), end="")


def _drafters() -> list[tuple[str, Path, float]]:
    """(name, drafter directory, held-out loss) of every study drafter plus the demo pair's own."""
    demo = demo_pair_paths()
    report = BuildReport.load(demo.root / "build_report.json").to_json()
    found = [("d160x1 (demo)", demo.draft, report["heldout_loss"]["draft"])]
    for spec in DRAFTERS:
        root = study_root() / spec.name
        if (root / "draft" / "config.json").is_file():
            loss = BuildReport.load(root / "build_report.json").to_json()["heldout_loss"]["draft"]
            found.append((spec.name, root / "draft", loss))
    return sorted(found, key=lambda item: -item[2])


def _target_loss(target_dir: Path) -> float:
    """The held-out loss of a target, on the same rows as the drafters' (build reports)."""
    from viasd_adapt.training import evaluate

    tokenizer, model = _load(target_dir)
    _, heldout = _training_rows(tokenizer, heldout_only=True)
    return evaluate.heldout_loss(model, heldout)


def _load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path)), AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def study(target_pair: str, exits: tuple[int, ...], prompts: int, tokens: int, out: Path | None, plot: Path | None) -> dict:
    """Per drafter: Delta(u), the tier-2 rate, and tuned VIA-SD vs tuned lenient at the default budget."""
    from viasd_adapt.io import save_figure, write_json
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.prompts.splits import search_snippets, tune_snippets
    from viasd_adapt.search.decoder_windows import build_calibration, encode_prompts
    from viasd_adapt.search.objective import MaskObjective
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.tuning.tune import Budget, TuneConfig, TuneGrid, tune

    torch.set_num_threads(1)
    paths = resolve_pair(target_pair)
    target_loss = _target_loss(paths.target)
    rows = []
    calib_texts, _ = search_snippets(16, 0, seed=0)
    tune_prompts = tune_snippets(prompts)
    for name, draft_dir, draft_loss in _drafters():
        started = time.perf_counter()
        pair = load_pair(paths.target, draft_dir, paths.mask, device="cpu")
        calibration = build_calibration(pair.target, pair.draft, encode_prompts(pair.tokenizer, calib_texts), 48)
        score = MaskObjective(pair.target, calibration, TierSettings()).score(pair.mask.mask)
        result = tune(pair, tune_prompts, TuneConfig(tokens, TuneGrid(), Budget(), exits=exits))
        best = {family: result.best(family) for family in ("none", "lenient", "lossy-fixed")}
        paper = next(p for p in result.points if p.family == "lossy-fixed" and p.mask == pair.mask.source
                     and p.settings.alpha1 == 0.5 and p.settings.alpha2 == 0.3 and p.settings.greedy_gates == "proposer")
        row = {
            "drafter": name, "drafter_loss": draft_loss, "target_loss": target_loss, "gap": draft_loss - target_loss,
            "delta": score.delta, "mask": list(pair.mask.mask.skipped),
            "tier2_per_cycle": paper.metrics["slim_tokens"] / max(1, paper.metrics["cycles"]),
            "best": {k: (v.to_dict() if v else None) for k, v in best.items()},
            "chosen": result.chosen.family,
            "gain_vs_lenient": (1 - best["lossy-fixed"].full_equivalent / best["lenient"].full_equivalent)
            if best["lossy-fixed"] and best["lenient"] else None,
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        cost = {family: f"{point.full_equivalent:.3f}" if point else "none within budget" for family, point in best.items()}
        gain = f"{row['gain_vs_lenient']:+.1%}" if row["gain_vs_lenient"] is not None else "n/a"
        print(f"{name}: gap {row['gap']:.2f}, Delta {row['delta']:+.1f}, tier-2/cycle {row['tier2_per_cycle']:.3f}, "
              f"best SD {cost['none']}, lenient {cost['lenient']}, VIA-SD {cost['lossy-fixed']} -> chosen {row['chosen']}, "
              f"gain vs lenient {gain}", flush=True)
    data = {"target": str(paths.target), "exits": list(exits), "prompts": prompts, "tokens": tokens, "rows": rows}
    if out:
        write_json(out, data)
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        measured = [r for r in rows if r["gain_vs_lenient"] is not None]  # no point: a family had none within budget
        xs = [r["gap"] for r in measured]
        ys = [100 * r["gain_vs_lenient"] for r in measured]
        ax.plot(xs, ys, "-o")
        for r, x, y in zip(measured, xs, ys):
            ax.annotate(r["drafter"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.axhline(15, color="green", linestyle="--", linewidth=0.8, label="goal: 15% fewer passes than lenient")
        ax.set_xlabel("capacity gap: drafter held-out loss - target held-out loss (nats/token)")
        ax.set_ylabel("tuned VIA-SD vs tuned lenient, % fewer full-equivalent passes")
        ax.set_title(f"gain vs gap, target {paths.name} (budget: LL drop <= 0.02)", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        save_figure(fig, plot)
        plt.close(fig)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the study's drafters for the demo target")
    p_train.add_argument("--only", nargs="*", default=[], help="drafter names (default: all)")
    p_train.add_argument("--seed", type=int, default=0)
    p_train.add_argument("--threads", type=int, default=1)
    p_study = sub.add_parser("study", help="tune every drafter with a target; table and figure")
    p_study.add_argument("--target-pair", default="demo", help="pair whose target (and mask.json) is used")
    p_study.add_argument("--exits", default="", help="early-exit masks to include, e.g. 6,8,10")
    p_study.add_argument("--prompts", type=int, default=12)
    p_study.add_argument("--tokens", type=int, default=48)
    p_study.add_argument("--json", type=Path, default=None)
    p_study.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "train":
        train(args.only, args.seed, args.threads)
    else:
        exits = tuple(int(k) for k in args.exits.split(",") if k.strip())
        study(args.target_pair, exits, args.prompts, args.tokens, args.json, args.plot)


if __name__ == "__main__":
    main()
