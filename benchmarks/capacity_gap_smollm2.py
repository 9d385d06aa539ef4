"""Capacity-gap study on the real target: does the slim tier pay more when the
drafter is much weaker than SmolLM2-135M-Instruct?

The drafters are checkpoints of the shipped drafter's own recipe (``viasd models build --recipe
smollm2``: the same cached target answers, vocabulary and initialisation), trained for fewer
steps, so that they differ in strength and in nothing else:

* ``steps-1``: one optimiser step from the initialisation (the target's layer 0 and final norm
  with a unigram bias): the weakest drafter the recipe makes;
* ``steps-38``: an eighth of the shipped schedule;
* ``steps-76``: a quarter;
* ``shipped``: the shipped drafter (304 steps).

Per drafter the study measures its held-out top-1 agreement with the target, then runs
``viasd tune``'s sweep with the grid, budget and Spec-Bench calibration prompts the shipped
smollm2 tune used (``benchmarks/run_results.sh``: alpha1 0/0.5, alpha2 0/0.3, top gates, the four
lenience values; 10 points) with the pair's shipped mask, and reports the best untiered SD, lenient and
VIA-SD points, the tuner's choice, and the tier's gain over lenient.

    python benchmarks/capacity_gap_smollm2.py train            # needs the build's cached answers
    python benchmarks/capacity_gap_smollm2.py study --json benchmarks/results/capacity_smollm2.json

``train`` reads the target answers ``viasd models build --recipe smollm2`` caches (it generates
them first if the cache is cold: about an hour on 2 cores). Pairs are written to
``$VIASD_CACHE/capacity/smollm2-<name>/``, each a declared pair directory for ``--pair``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import torch

from viasd_adapt.models.registry import cache_dir
from viasd_adapt.config.build_report import BuildReport
from viasd_adapt.config.pair_file import PairFile

CHECKPOINTS = {"steps-1": 1, "steps-38": 38, "steps-76": 76}
#: the shipped smollm2 tune's grid (benchmarks/run_results.sh), not TuneGrid()'s 30 points: a weak
#: drafter makes every point slow on a CPU
GRID = dict(alpha1=(0.0, 0.5), alpha2=(0.0, 0.3), greedy_gates=("top",))


def study_root() -> Path:
    return cache_dir() / "capacity"


def _epochs_for(steps: int, train_examples: int, batch_size: int) -> float:
    """The preset ``epochs`` that makes :func:`train_drafter` run exactly ``steps`` steps."""
    return steps * batch_size / train_examples


def train(names: list[str], seed: int, threads: int) -> None:
    from viasd_adapt.io import write_directory, write_json
    from viasd_adapt.training.distill_build import DISTILL_PRESETS, _eos_ids, smollm2_target
    from viasd_adapt.training.distill_data import cached_target_answers
    from viasd_adapt.prompts.distill import training_prompts
    from viasd_adapt.training.drafter_distill import split_examples, train_drafter
    from viasd_adapt.models.loading import load_model, load_tokenizer
    from viasd_adapt.models.registry import DECLARATION, shipped_dir
    from viasd_adapt.models.shared_drafter import save_drafter

    torch.set_num_threads(threads)
    preset = DISTILL_PRESETS["smollm2"]
    target_path = smollm2_target()
    target = load_model(target_path, torch.device("cpu"), "target")
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    tokenizer = load_tokenizer(target_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples = cached_target_answers(target, tokenizer, training_prompts(preset.num_prompts, seed=seed),
                                     preset.max_new_tokens, preset.generation_batch_size, preset.top_k,
                                     preset.max_prompt_tokens, lambda m: print(m, flush=True))
    train_examples = len(split_examples(examples, preset.heldout_every)[0])
    declaration = PairFile.load(shipped_dir() / "smollm2" / DECLARATION).to_json()
    for name, steps in CHECKPOINTS.items():
        if names and name not in names:
            continue
        out = study_root() / f"smollm2-{name}"
        if (out / "draft").is_dir():
            print(f"{name}: already built at {out}")
            continue
        checkpoint = replace(preset, name=f"smollm2-{name}", eagle_head_examples=0,
                             epochs=_epochs_for(steps, train_examples, preset.batch_size))
        drafter, token_ids, bias, report = train_drafter(target, examples, checkpoint, seed, _eos_ids(target, tokenizer), pad)
        assert report["steps"] == steps, (report["steps"], steps)
        out.mkdir(parents=True, exist_ok=True)
        record = {"preset": checkpoint.name, "seed": seed, "num_layers": checkpoint.num_layers, "report": report}
        write_directory(out / "draft", lambda d: save_drafter(drafter, token_ids, target, d, record, bias), "drafter")
        write_json(out / DECLARATION, dict(declaration, drafter="draft"), "pair declaration")
        write_json(out / "build_report.json", {"drafter": report, "preset": checkpoint.to_dict()}, "build report")
        for mask in sorted((shipped_dir() / "smollm2").glob("mask*.json")):
            (out / mask.name).write_bytes(mask.read_bytes())
        print(f"{name}: {steps} steps, held-out top-1 agreement {report['heldout']['top1_agreement']:.3f} -> {out}", flush=True)


def _drafters() -> list[tuple[str, Path, float]]:
    """(name, pair directory, held-out top-1 agreement) of every built checkpoint and the shipped pair."""
    from viasd_adapt.models.registry import shipped_dir

    shipped = shipped_dir() / "smollm2"
    found = [("shipped (304 steps)", shipped,
              BuildReport.load(shipped / "build_report.json").to_json()["drafter"]["heldout"]["top1_agreement"])]
    for name in CHECKPOINTS:
        root = study_root() / f"smollm2-{name}"
        if (root / "draft").is_dir():
            found.append((name, root, BuildReport.load(root / "build_report.json").to_json()["drafter"]["heldout"]["top1_agreement"]))
    return sorted(found, key=lambda item: item[2])


def study(prompts: int, tokens: int, out: Path | None, threads: int) -> dict:
    from viasd_adapt.bench.prompt_sets import tune_spec_bench_prompts
    from viasd_adapt.io import write_json
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.tuning.tune import Budget, TuneConfig, TuneGrid, tune

    torch.set_num_threads(threads)
    rows = []
    for name, pair_dir, agreement in _drafters():
        started = time.perf_counter()
        paths = resolve_pair(str(pair_dir))
        pair = load_pair(paths.target, paths.draft, paths.mask, device="cpu")
        calibration = tune_spec_bench_prompts(pair, prompts, "auto", tokens)
        # masks named relative to the pair folder: results must not hold this machine's paths
        result = tune(pair, calibration, TuneConfig(tokens, TuneGrid(**GRID), Budget())).relative_to(pair_dir)
        best = {family: result.best(family) for family in ("none", "lenient", "lossless-fixed", "lossy-fixed")}
        sd = best["none"]
        row = {
            "drafter": name, "heldout_top1_agreement": agreement,
            "tau_sd": sd.metrics["mean_accepted_length"] if sd else None,
            "best": {k: (v.to_dict() if v else None) for k, v in best.items()},
            "chosen": result.chosen.family,
            "gain_vs_lenient": (1 - best["lossy-fixed"].full_equivalent / best["lenient"].full_equivalent)
            if best["lossy-fixed"] and best["lenient"] else None,
            "seconds": round(time.perf_counter() - started, 1),
        }
        plain = next((p for p in result.points if p.family == "lossy-fixed"), None)
        row["tier2_per_cycle"] = plain.metrics["slim_tokens"] / max(1, plain.metrics["cycles"]) if plain else None
        row["escalated_share"] = plain.metrics["escalated_cycles"] / max(1, plain.metrics["cycles"]) if plain else None
        rows.append(row)
        cost = {family: f"{point.full_equivalent:.3f}" if point else "none within budget" for family, point in best.items()}
        gain = f"{row['gain_vs_lenient']:+.1%}" if row["gain_vs_lenient"] is not None else "n/a"
        print(f"{name}: agreement {agreement:.3f}, SD accepted length {row['tau_sd']}, best SD {cost['none']}, lenient "
              f"{cost['lenient']}, lossless {cost['lossless-fixed']}, VIA-SD {cost['lossy-fixed']} -> chosen {row['chosen']}, "
              f"gain vs lenient {gain} ({row['seconds']:.0f}s)", flush=True)
    data = {"target": "SmolLM2-135M-Instruct", "prompts": prompts, "tokens": tokens, "threads": threads, "rows": rows}
    if out:
        write_json(out, data)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the study's drafter checkpoints from the build's cached answers")
    p_train.add_argument("--only", nargs="*", default=[], help=f"checkpoint names (default: all of {', '.join(CHECKPOINTS)})")
    p_train.add_argument("--seed", type=int, default=0)
    p_train.add_argument("--threads", type=int, default=1)
    p_study = sub.add_parser("study", help="tune every drafter with the target; table")
    p_study.add_argument("--prompts", type=int, default=8)
    p_study.add_argument("--tokens", type=int, default=32)
    p_study.add_argument("--threads", type=int, default=1)
    p_study.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "train":
        train(args.only, args.seed, args.threads)
    else:
        study(args.prompts, args.tokens, args.json, args.threads)


if __name__ == "__main__":
    main()
