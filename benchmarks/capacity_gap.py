"""Capacity-gap study: does the slim tier pay more when the drafter is much weaker than the target?

The paper claims VIA-SD's gain grows with the drafter-target capacity gap. This script trains
drafters of clearly different strength for the shipped demo target (same tokenizer, same corpus,
same recipe as the demo drafter), then, per drafter, measures Delta(u), how often tier 2 fires,
and tuned VIA-SD against tuned lenient acceptance at the default fidelity budget.

    python benchmarks/capacity_gap.py train            # a few CPU minutes per drafter, 1 thread
    python benchmarks/capacity_gap.py study            # tune every pair, write the table and figure

Pairs are written to ``$VIASD_CACHE/capacity/<name>/`` (``target`` links to the shipped demo
target, ``draft`` is the new drafter), so each is an ordinary pair directory for ``--pair``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from viasd_adapt.models import corpus, evaluate
from viasd_adapt.models.presets import DEMO, ModelShape
from viasd_adapt.models.registry import cache_dir, demo_pair_paths
from viasd_adapt.models.train import chunk, llama_config, new_model, token_stream, train_model


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


def _training_rows(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    train_files, _ = corpus.split_files()
    texts = [f.read() for f in train_files]
    rows = chunk(token_stream(texts, tokenizer), DEMO.seq_len)
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
        (staging / "build_report.json").write_text(json.dumps(report, indent=2) + "\n")
        staging.rename(out)
        print(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the study's drafters for the demo target")
    p_train.add_argument("--only", nargs="*", default=[], help="drafter names (default: all)")
    p_train.add_argument("--seed", type=int, default=0)
    p_train.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.command == "train":
        train(args.only, args.seed, args.threads)


if __name__ == "__main__":
    main()
