"""A demo-sized target trained for early exit: does a target built for it make the slim tier pay?

The shipped demo target was trained with LayerDrop (random layers skipped), which keeps *any*
routing mask usable but makes none of them very close to the target. LayerSkip-style early-exit
training adds, at every step, the cross-entropy of the shared final norm + LM head applied to the
residual stream entering a few middle layers, so that "the first k layers" alone predicts almost
what the whole stack predicts. That slim verifier (a mask skipping layers k..L-1, s1 = k) is also
the cheapest to share with the target: everything it computes is reused when q resumes at s1.

This script trains such a target with the shipped demo pair's tokenizer and drafter (so the
drafter side of the comparison is unchanged) and writes an ordinary pair directory:

    python benchmarks/early_exit_pair.py            # ~25-50 CPU minutes, 1 thread (shipped as assets/demo-ee)
    viasd search --pair ~/.cache/viasd-adapt/demo-ee ...   # then search, tune and bench it

Output: ``$VIASD_CACHE/demo-ee/{target,draft,build_report.json}`` (``draft`` is a copy of the
shipped drafter).
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import replace

import torch

from viasd_adapt.training import corpus, evaluate
from viasd_adapt.training.presets import DEMO, DEMO_EE
from viasd_adapt.models.registry import cache_dir, demo_pair_paths
from viasd_adapt.training.train import chunk, llama_config, new_model, token_stream, train_model
from viasd_adapt.config.build_report import BuildReport
from viasd_adapt.io import json_text

EXIT_LAYERS = DEMO_EE.target_training.early_exit_layers
EXIT_WEIGHT = DEMO_EE.target_training.early_exit_weight


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=DEMO.target_training.steps)
    parser.add_argument("--name", default="demo-ee")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    demo = demo_pair_paths()
    tokenizer = AutoTokenizer.from_pretrained(str(demo.target))
    drafter = AutoModelForCausalLM.from_pretrained(str(demo.draft), dtype=torch.float32).eval()
    train_files, _ = corpus.split_files()
    rows = chunk(token_stream([f.read() for f in train_files], tokenizer), DEMO.seq_len)
    heldout = chunk(token_stream(corpus.heldout_text(), tokenizer), DEMO.seq_len)
    heldout = heldout[torch.linspace(0, heldout.size(0) - 1, DEMO.eval_sequences).round().long()]

    budget = replace(DEMO_EE.target_training, steps=args.steps)
    target = new_model(llama_config(DEMO.target, tokenizer, DEMO.seq_len), args.seed)
    with torch.no_grad():  # start from the drafter's trained embedding, as the demo target did
        target.get_input_embeddings().weight.copy_(drafter.get_input_embeddings().weight)
    losses = train_model(target, rows, budget, args.seed, "target (early exit)")
    target.half().float()

    target_argmax = evaluate.argmax_predictions(target, heldout)
    exits = {}
    for k in range(4, DEMO.target.num_layers, 2):
        skip = list(range(k, DEMO.target.num_layers))
        exits[k] = {
            "heldout_loss": evaluate.heldout_loss(target, heldout, skip),
            "argmax_agreement_with_target": evaluate.agreement(evaluate.argmax_predictions(target, heldout, skip), target_argmax),
        }
    report = {
        "what": "demo-shaped target trained with LayerDrop + early-exit loss; tokenizer and drafter from the shipped demo pair",
        "early_exit_layers": EXIT_LAYERS,
        "early_exit_weight": EXIT_WEIGHT,
        "seed": args.seed,
        "threads": args.threads,
        "steps": args.steps,
        "final_train_loss": sum(losses[-20:]) / 20,
        "heldout_loss": {"target": evaluate.heldout_loss(target, heldout), "draft": evaluate.heldout_loss(drafter, heldout)},
        "draft_argmax_agreement_with_target": evaluate.agreement(evaluate.argmax_predictions(drafter, heldout), target_argmax),
        "early_exit_at_layer": exits,
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = cache_dir() / args.name
    staging = out.with_name(f".{args.name}-building")
    shutil.rmtree(staging, ignore_errors=True)
    target.half().save_pretrained(staging / "target")
    tokenizer.save_pretrained(staging / "target")
    shutil.copytree(demo.draft, staging / "draft")
    BuildReport.from_json(report).save(staging / "build_report.json")
    if out.exists():
        raise SystemExit(f"{out} exists; remove it or pass --name")
    staging.rename(out)
    print(json_text(report), end="")


if __name__ == "__main__":
    main()
