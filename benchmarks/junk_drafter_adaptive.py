"""The drafter-quality monitor under the default (adaptive) lossy mode, as a user meets it.

The adaptive tier keeps a junk drafter's lossy run untiered nearly throughout, so gate 1 sees few
drafts; the monitor then judges the first draft of each untiered cycle in q's view
(``viasd_adapt/core/monitor.py``). This script runs ``viasd generate --mode lossy`` (adaptive, the
default) per framework on good drafters (each pair's own, prompt lookup) and junk ones of the same
vocabulary (random weights of the drafter's architecture; the pair's own drafter with its token ids
permuted), greedy and at temperature 1, and counts the generations that got the warning:

    python benchmarks/junk_drafter_adaptive.py --pairs demo,demo-ee --frameworks hf,pearl,engine \\
        --prompts 6 > benchmarks/results/junk_drafter_adaptive.txt
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from junk_drafter_monitor import _permuted, _random  # noqa: E402


def _drafters(name: str, folder: Path) -> dict[str, tuple[str | None, bool]]:
    """Name -> (``--draft`` value, good?): the pair's own (None), prompt lookup, and two junk ones saved to ``folder``."""
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import resolve_pair

    paths = resolve_pair(name)
    pair = load_pair(paths.target, paths.draft, paths.mask, device="cpu")
    drafters: dict[str, tuple[str | None, bool]] = {"own": (None, True), "prompt-lookup": ("prompt-lookup", True)}
    for junk_name, model in (("random-0", _random(pair.draft, 0)), ("permuted", _permuted(pair.draft, 0))):
        out = folder / f"{name}-{junk_name}"
        model.save_pretrained(out)
        pair.tokenizer.save_pretrained(out)
        drafters[junk_name] = (str(out), False)
    return drafters


def _prompts(name: str, count: int) -> list[str]:
    from viasd_adapt.prompts.splits import bench_questions, bench_snippets

    if name == "smollm2":
        return [q.turns[0] for q in bench_questions(per_category=-(-count // 6))][:count]
    return list(bench_snippets(count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="demo,demo-ee")
    parser.add_argument("--frameworks", default="hf,pearl,engine")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli
    from viasd_adapt.core.monitor import ViasdQualityWarning

    torch.set_num_threads(1)
    warned: Counter = Counter()
    total: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for pair in [p for p in args.pairs.split(",") if p]:
            drafters = _drafters(pair, Path(tmp))
            for framework in [f for f in args.frameworks.split(",") if f]:
                for drafter, (draft, good) in drafters.items():
                    if framework == "pearl" and draft == "prompt-lookup":
                        continue  # PEARL drafts with a model
                    for sampling in ("greedy", "T=1"):
                        for index, prompt in enumerate(_prompts(pair, args.prompts)):
                            command = ["generate", "--pair", pair, "--framework", framework, "--mode", "lossy",
                                       "--prompt", prompt, "--max-new-tokens", str(args.max_new_tokens), "--no-color"]
                            command += ["--draft", draft] if draft else []
                            command += ["--temperature", "1.0", "--seed", str(index)] if sampling == "T=1" else []
                            with warnings.catch_warnings(record=True) as caught:
                                warnings.simplefilter("always")
                                result = CliRunner().invoke(cli, command)
                            if result.exit_code != 0:
                                raise SystemExit(f"{' '.join(command)} failed: {result.output[-400:]}")
                            key = (pair, framework, drafter, sampling, good)
                            total[key] += 1
                            warned[key] += any(issubclass(w.category, ViasdQualityWarning) for w in caught)
                        key = (pair, framework, drafter, sampling, good)
                        print(f"  {pair:<8} {framework:<7} {drafter:<14} {sampling:<7} "
                              f"{'false alarms' if good else 'detected':<13}{warned[key]:>3}/{total[key]}", flush=True)
    good = [k for k in total if k[4]]
    junk = [k for k in total if not k[4]]
    print(f"  ALL good: false alarms {sum(warned[k] for k in good)}/{sum(total[k] for k in good)}; "
          f"ALL junk: detected {sum(warned[k] for k in junk)}/{sum(total[k] for k in junk)}")


if __name__ == "__main__":
    main()
