"""Write the README's verdict table and docs/results.md's summary tables from the saved reports.

    python benchmarks/render_tables.py            # rewrite every table in place
    python benchmarks/render_tables.py --check    # exit 1, naming the table, if one differs

Why a script: a figure copied by hand drifts from the report it came from, and a row assembled from
two runs priced in two ways reads as one measurement. Here every cell is read from one saved
``viasd bench --json`` report under ``benchmarks/results/``, and a table whose report was priced
before one-token target passes were priced apart (its rows carry no ``single_passes_per_token``)
says so in the row itself. ``tests/bench/test_rendered_tables.py`` checks that the Markdown holds
what this script renders.

Each table sits in its Markdown file between two comments::

    <!-- rendered: NAME (benchmarks/render_tables.py) -->
    ...
    <!-- end rendered: NAME -->

To add a report, a pair or a renamed row, edit the source tables below: :data:`VERDICT_COLUMNS`
(which row each column of the verdict table reads), :data:`VERDICT_ROWS` (one README row per
report), :data:`BENCH_TABLES` and :data:`TASK_TABLES` (docs/results.md's bench tables) and :data:`ADAPTIVE_COLUMNS` /
:data:`ADAPTIVE_REPORTS` (the adaptive tier's table).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from viasd_adapt.bench.report import load_bench_report
from viasd_adapt.config.mask import MaskArtifact

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

# ----------------------------------------------------------------------------- the source tables

#: The verdict table's measured columns: (header, row key). A row key is ``framework/mode``, or
#: ``ar`` for the target alone. When a mode's rows are renamed, change the key here (these reports'
#: ``lossless`` and ``lossy`` rows run the tier on every cycle: the fixed tier).
VERDICT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("AR", "ar"),
    ("untiered SD", "hf/none"),
    ("lenient", "hf/lenient"),
    ("fixed lossless tier", "hf/lossless-fixed"),
    ("fixed lossy tier", "hf/lossy-fixed"),
)

#: The verdict table's projected columns (priced with the report's own projection, or with
#: :data:`PROJECTION_COSTS` where the report has none).
PROJECTED_COLUMNS: tuple[str, ...] = ("hf/none", "hf/lenient", "hf/lossy-fixed")
PROJECTION_COSTS = "h200-llama2-7b"

#: The framework whose verdict the verdict table quotes.
VERDICT_FRAMEWORK = "hf"


@dataclass(frozen=True)
class VerdictRow:
    """One row of the README's verdict table: its short name, what it is (Markdown) and the one
    report it reads."""

    name: str
    label: str
    report: str


VERDICT_ROWS: tuple[VerdictRow, ...] = (
    VerdictRow("demo", "[demo](docs/results.md#viasd-bench-on-the-demo-pairs): 5.6M-parameter code pair, 8 held-out prompts",
               "bench_demo.json"),
    VerdictRow("demo-ee", "[demo-ee](docs/results.md#viasd-bench-on-the-demo-pairs): early-exit target, same prompts",
               "bench_demo-ee.json"),
    VerdictRow("SmolLM2 + drafter", "[SmolLM2-135M-Instruct](docs/results.md#viasd-bench-with-the-distilled-drafter) + distilled "
               "drafter, 7 Spec-Bench prompts", "bench_smollm2_drafter_spec_bench.json"),
    VerdictRow("SmolLM2 + prompt lookup", "[SmolLM2-135M-Instruct](docs/results.md#viasd-bench-with-prompt-lookup-per-spec-bench-task) + "
               "prompt lookup, 14 Spec-Bench prompts", "bench_smollm2_spec_bench.json"),
)


@dataclass(frozen=True)
class BenchTable:
    """A docs/results.md table of bench rows: the reports it reads (each with the row keys it takes
    from that report, in order) and its columns (names of :data:`BENCH_CELLS`)."""

    reports: tuple[tuple[str, tuple[str, ...]], ...]
    columns: tuple[str, ...]


_BENCH_MODES = ("none", "lenient", "lossless-fixed", "lossy-fixed", "audit")
_DEMO_COLUMNS = ("row", "feq/tok", "tok/s", "x_unt", "LL drop", "regret", "overrule")

BENCH_TABLES: dict[str, BenchTable] = {
    "bench-demo": BenchTable(
        (("bench_demo.json", ("ar", *(f"{fw}/{m}" for fw in ("hf", "pearl") for m in _BENCH_MODES))),
         ("bench_demo_eagle.json", tuple(f"eagle/{m}" for m in _BENCH_MODES))),
        _DEMO_COLUMNS),
    "bench-demo-ee": BenchTable(
        (("bench_demo-ee.json", ("ar", *(f"{fw}/{m}" for fw in ("hf", "pearl") for m in _BENCH_MODES))),),
        _DEMO_COLUMNS),
    "bench-smollm2-drafter": BenchTable(
        (("bench_smollm2_drafter_spec_bench.json",
          ("ar", "lookup/plain", "hf/plain", *(f"{fw}/{m}" for fw in ("hf", "pearl")
                                                for m in ("none", "lenient", "lossless-fixed", "lossy-fixed")))),),
        ("row", "tau", "x_ar", "feq/tok", "LL drop", "regret", "identical to AR", "feq/tok projected (H200, 7B shape)")),
    "bench-smollm2-lookup": BenchTable(
        (("bench_smollm2_spec_bench.json", ("ar", "hf/none", "hf/lenient", "hf/lossless-fixed", "hf/lossy-fixed")),),
        ("row", "tau", "x_ar", "feq/tok", "LL drop", "regret", "identical to AR", "feq/tok projected (H200, 7B shape)")),
}

@dataclass(frozen=True)
class TaskTable:
    """A docs/results.md table of one Spec-Bench report per task: the report, the row keys it shows
    (AR first), and which cells each row shows (names of :data:`BENCH_CELLS`)."""

    report: str
    keys: tuple[str, ...]
    cells: dict[str, tuple[str, ...]]


TASK_TABLES: dict[str, TaskTable] = {
    "bench-smollm2-lookup-tasks": TaskTable(
        "bench_smollm2_spec_bench.json", ("ar", "hf/none", "hf/lenient", "hf/lossless-fixed", "hf/lossy-fixed"),
        {"ar": ("feq/tok",), "hf/none": ("tau", "feq/tok", "x_ar"), "hf/lenient": ("tau", "feq/tok", "LL drop"),
         "hf/lossless-fixed": ("tau", "feq/tok"), "hf/lossy-fixed": ("tau", "feq/tok", "LL drop")}),
}

#: The adaptive tier's table: (header, row key of the mode within each framework, what the cell
#: shows). The adaptive rows are ``lossless-adaptive`` / ``lossy-adaptive`` and the fixed tier's
#: ``lossless`` / ``lossy`` in these reports; when they are renamed, change the keys here.
ADAPTIVE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("adaptive lossless", "lossless", "cost"),
    ("adaptive lossy", "lossy", "cost"),
    ("fixed lossless", "lossless-fixed", "cost"),
    ("fixed lossy", "lossy-fixed", "cost"),
    ("tier on (adaptive lossy)", "lossy", "tier_share"),
    ("lossless tok/s vs untiered", "lossless", "speed"),
)

#: (what the pair is, report) for the adaptive tier's table, in order; every framework of a report
#: that has an untiered row is a row of the table.
ADAPTIVE_REPORTS: tuple[tuple[str, str], ...] = (
    ("demo", "adaptive_goals_demo.json"),
    ("demo-ee", "adaptive_goals_demo-ee.json"),
    ("SmolLM2, drafter", "adaptive_goals_smollm2.json"),
    ("SmolLM2, drafter", "adaptive_goals_smollm2-pearl-eagle.json"),
    ("SmolLM2, prompt lookup", "adaptive_goals_smollm2-lookup.json"),
)

@dataclass(frozen=True)
class PaperPair:
    """A measured pair beside the paper's figures (docs/paper.md): what it is, its bench report
    (hf rows ``none`` and ``lossy``) and its mask artifact (held-out agreement)."""

    label: str
    report: str
    mask: str


PAPER_PAIRS: tuple[PaperPair, ...] = (
    PaperPair("demo, 5.6M, 16 layers (r = 0.45)", "bench_demo.json", "viasd_adapt/assets/demo/mask.json"),
    PaperPair("demo-ee, 5.6M, 16 layers (r = 0.44)", "bench_demo-ee.json", "viasd_adapt/assets/demo-ee/mask.json"),
    PaperPair("SmolLM2-135M, 30 layers (r = 0.1), distilled drafter", "bench_smollm2_drafter_spec_bench.json",
              "viasd_adapt/assets/smollm2/mask.json"),
    PaperPair("SmolLM2-135M, 30 layers (r = 0.1), prompt lookup", "bench_smollm2_spec_bench.json",
              "viasd_adapt/assets/smollm2/mask.json"),
)

#: The paper's speed-ups (over AR; over untiered SD) and the escalation rates the conditions table
#: shows, for a target priced by :data:`PROJECTION_COSTS`.
PAPER_SPEEDUP_OVER_AR = (2.5, 3.0)
PAPER_GAIN_OVER_SD = (1.1, 1.2)
ESCALATION_RATES = (0.1, 0.25, 0.5, 0.75, 1.0)
PAPER_GAMMA = 5

FRAMEWORK_NAMES = {"hf": "hf", "pearl": "PEARL", "eagle": "EAGLE", "engine": "engine"}

#: How a verdict names each row it can pick.
VERDICT_NAMES = {"ar": "AR", "lookup": "stock prompt lookup", "none": "untiered", "plain": "untiered",
                 "lenient": "lenient", "lossless": "adaptive lossless", "lossy": "adaptive lossy",
                 "lossless-fixed": "lossless tier", "lossy-fixed": "lossy tier"}

OLD_PRICING = ("priced before each target pass was priced by the tokens it fed: a pass that fed one token "
               "(prompt lookup with no match) counts as a block pass, so prompt lookup reads dearer, and AR's "
               "prompt pass as a one-token pass, so AR reads about 1% cheaper")

# ----------------------------------------------------------------------------- reading reports

Loader = Callable[[str], dict]


def load_from(folder: Path) -> Loader:
    """A loader of reports by file name, from ``folder`` (the tests point it at an edited copy)."""
    cache: dict[str, dict] = {}

    def load(name: str) -> dict:
        if name not in cache:
            cache[name] = load_bench_report(folder / name).to_json()
        return cache[name]

    return load


def row_key(row: dict) -> str:
    return "ar" if row["framework"] == "ar" else f"{row['framework']}/{row['mode']}"


def rows_by_key(report: dict) -> dict[str, dict]:
    return {row_key(row): row for row in report["rows"]}


def old_pricing(report: dict) -> bool:
    """Whether the report was priced before one-token passes were priced apart: its rows do not
    carry the one-token pass count the current pricing reads."""
    return not any("single_passes_per_token" in row for row in report["rows"])


def projected_rows(report: dict) -> dict[str, dict]:
    """The report's rows priced on the H200 cost model: the report's own projection where it made
    one, else the same projection applied now to its pass counts (as ``viasd bench --costs`` does)."""
    saved = (report["run"].get("projection") or {}).get("rows")
    if saved:
        return {row_key(row): row for row in saved}
    from viasd_adapt.bench.projection import load_cost_model, project_rows
    from viasd_adapt.config.mask import RoutingMask

    mask = report["run"].get("mask") or {}
    routing = RoutingMask.from_skipped(len(mask["bits"]), mask["skipped_layers"]) if mask.get("bits") else None
    rows = project_rows(report["rows"], load_cost_model(PROJECTION_COSTS), routing, report["run"]["settings"]["gamma"] + 1)
    return {row_key(row): row for row in rows}


# ----------------------------------------------------------------------------- cells


def number(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def verdict_summary(verdict: str) -> str:
    """A verdict line of a report, shortened to what it picked and how sure it is.

    >>> verdict_summary("hf: cheapest within ... is lookup (0.693 full-equivalent passes/token; all: ...). "
    ...                 "Stock ... use lookup (generate(...)). Undetermined at 14 prompts (holds in 76% of 1000 ...")
    'stock prompt lookup (0.693); undetermined at 14 prompts: holds in 76% of resamples'
    >>> verdict_summary("hf: cheapest ... is lenient (0.562 full-equivalent passes/token; ...). ... but it is "
    ...                 "undetermined at 14 prompts (holds in 51% of 1000 ...): use the simpler none.")
    'untiered: lenient (0.562) is cheapest but undetermined at 14 prompts: holds in 51% of resamples'
    """
    cheapest = re.search(r" is (\S+) \(([\d.]+) full-equivalent", verdict)
    used = re.search(r"\buse (?:the simpler )?([\w-]+)", verdict)
    sure = re.search(r"([Uu]ndetermined|Determined) at (\d+) prompts \(holds in (\d+)%", verdict)
    if cheapest is None or used is None:
        raise ValueError(f"cannot read the verdict {verdict!r}")
    pick, cost, use = cheapest.group(1), cheapest.group(2), used.group(1)
    name = VERDICT_NAMES.get
    how_sure = f"{sure.group(1).lower()} at {sure.group(2)} prompts: holds in {sure.group(3)}% of resamples" if sure else ""
    if use == pick:
        return f"{name(use, use)} ({cost})" + (f"; {how_sure}" if how_sure else "")
    text = f"{name(use, use)}: {name(pick, pick)} ({cost}) is cheapest"
    text += f" but {how_sure}" if how_sure else " but not chosen"
    return text


def framework_verdict(report: dict, framework: str) -> str:
    found = [line for line in report["run"]["verdict"] if line.startswith(f"{framework}: ")]
    if len(found) != 1:
        raise ValueError(f"{report['run']['command']!r} has no single {framework} verdict")
    return found[0]


BENCH_CELLS: dict[str, Callable[[dict, dict, dict | None], str]] = {
    "row": lambda row, report, projected: row_key(row),
    "feq/tok": lambda row, report, projected: number(row["full_equivalent_per_token"]),
    "tok/s": lambda row, report, projected: f"{row['tokens_per_s']:.0f}",
    "x_unt": lambda row, report, projected: number(row.get("speedup_vs_untiered"), 2),
    "x_ar": lambda row, report, projected: number(row.get("speedup_vs_ar"), 2),
    "tau": lambda row, report, projected: number(row.get("tau"), 2),
    "LL drop": lambda row, report, projected: number(row.get("ll_drop"), 3, sign=True),
    "regret": lambda row, report, projected: number(row.get("regret")),
    "overrule": lambda row, report, projected: number(row.get("overrule_rate")),
    "identical to AR": lambda row, report, projected: (
        "-" if row.get("identical_outputs") is None
        else f"{round(row['identical_outputs'] * report['run']['prompts'])}/{report['run']['prompts']}"),
    "feq/tok projected (H200, 7B shape)": lambda row, report, projected: number(
        projected and projected.get("full_equivalent_per_token")),
}


def markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cells) + " |" for cells in body])


# ----------------------------------------------------------------------------- the tables


def render_verdict(load: Loader) -> str:
    """The README's verdict table, one row per report of :data:`VERDICT_ROWS`, and the fidelity of
    its lenient and lossy cells."""
    header = ["pair and prompts", *(name for name, _ in VERDICT_COLUMNS), f"verdict ({VERDICT_FRAMEWORK})",
              "H200 projection: " + " / ".join(VERDICT_NAMES[key.split("/")[1]] for key in PROJECTED_COLUMNS)]
    body, fidelity, marked = [], [], False
    for source in VERDICT_ROWS:
        report = load(source.report)
        rows, projected = rows_by_key(report), projected_rows(report)
        label = source.label
        if old_pricing(report):
            label, marked = label + " (older pricing*)", True
        cells = [number(rows[key]["full_equivalent_per_token"]) for _, key in VERDICT_COLUMNS]
        shown = " / ".join(number(projected[key]["full_equivalent_per_token"]) for key in PROJECTED_COLUMNS)
        shown += f" (AR {number(projected['ar']['full_equivalent_per_token'])}"
        if "lookup/plain" in projected:
            shown += f", stock prompt lookup {number(projected['lookup/plain']['full_equivalent_per_token'])}"
        shown += ")"
        body.append([label, *cells, verdict_summary(framework_verdict(report, VERDICT_FRAMEWORK)), shown])
        fidelity.append(f"{source.name}: lenient {number(rows['hf/lenient']['ll_drop'], sign=True)} / "
                        f"{number(rows['hf/lenient']['regret'])}, lossy {number(rows['hf/lossy-fixed']['ll_drop'], sign=True)} / "
                        f"{number(rows['hf/lossy-fixed']['regret'])}")
    lines = markdown_table(header, body) + ["", "Fidelity of those cells (LL drop / regret, nats/token; the default "
                                               "budget allows 0.02 each): " + "; ".join(fidelity) + "."]
    if marked:
        lines.append(f"\n\\* {OLD_PRICING[0].upper()}{OLD_PRICING[1:]}; the row's other cells, its verdict and "
                     "projection are from the same report and pricing.")
    return "\n".join(lines)


def render_bench(table: BenchTable, load: Loader) -> str:
    """One docs/results.md bench table, every row from the report that measured it."""
    body, marked = [], []
    for name, keys in table.reports:
        report = load(name)
        rows = rows_by_key(report)
        projected = projected_rows(report) if any("projected" in c for c in table.columns) else {}
        if old_pricing(report):
            marked.append(name)
        for key in keys:
            if key not in rows:
                raise KeyError(f"{name} has no row {key!r} (its rows: {', '.join(rows)})")
            body.append([BENCH_CELLS[column](rows[key], report, projected.get(key)) for column in table.columns])
    lines = markdown_table(list(table.columns), body)
    if marked:
        lines.append("\nFrom " + " and ".join(f"`benchmarks/results/{name}`" for name in marked) + f", {OLD_PRICING}.")
    return "\n".join(lines)


def render_tasks(table: TaskTable, load: Loader) -> str:
    """Per Spec-Bench task, then overall: each row's cells of :attr:`TaskTable.cells`, comma-separated."""
    report = load(table.report)
    header = ["task"] + [f"{key} ({', '.join(table.cells[key])})" for key in table.keys]
    groups = [(f"{group} ({report['group_sizes'][group]} prompts)", rows_by_key({"rows": rows}))
              for group, rows in report["groups"].items()] + [("**overall**", rows_by_key(report))]
    body = [[task, *(", ".join(BENCH_CELLS[cell](rows[key], report, None) for cell in table.cells[key])
                     for key in table.keys)] for task, rows in groups]
    lines = markdown_table(header, body)
    if old_pricing(report):
        lines.append(f"\nFrom `benchmarks/results/{table.report}`, {OLD_PRICING}.")
    return "\n".join(lines)


def render_adaptive(load: Loader) -> str:
    """The adaptive tier's table: each cost over the same framework's untiered row."""
    header = ["pair", "framework", *(name for name, _, _ in ADAPTIVE_COLUMNS)]
    body = []
    for pair, name in ADAPTIVE_REPORTS:
        rows = rows_by_key(load(name))
        for framework in dict.fromkeys(r["framework"] for r in load(name)["rows"] if r["mode"] == "none"):
            untiered = rows[f"{framework}/none"]["full_equivalent_per_token"]
            cells = []
            for _, mode, shows in ADAPTIVE_COLUMNS:
                row = rows.get(f"{framework}/{mode}")
                if row is None:
                    cells.append("-")
                elif shows == "cost":
                    cells.append(number(row["full_equivalent_per_token"] / untiered))
                elif shows == "tier_share":
                    cells.append("-" if row.get("tier_share") is None else f"{row['tier_share']:.0%}")
                else:
                    cells.append(number(row.get("speedup_vs_untiered")))
            body.append([pair, FRAMEWORK_NAMES.get(framework, framework), *cells])
    return "\n".join(markdown_table(header, body))


def render_paper_measured(load: Loader) -> str:
    """What each measured pair's lossy tier depends on, from its bench report (hf) and its mask."""
    header = ["pair (CPU)", "slim pass / full block pass", "resumed q pass / full block pass",
              "slim verifier agrees with q (held out)", "escalation rate (lossy)", "rejection rate: untiered -> lossy",
              "tokens per cycle: untiered -> lossy", "lossy cost / untiered cost"]
    body = []
    for pair in PAPER_PAIRS:
        report = load(pair.report)
        rows, costs = rows_by_key(report), report["costs_seconds"]
        none, lossy = rows["hf/none"], rows["hf/lossy-fixed"]
        mask = MaskArtifact.load(REPO / pair.mask).to_json()
        slim = lossy["slim_passes_per_token"]
        body.append([pair.label, number(costs["c_slim"] / costs["c_full_block"], 2),
                     number(costs["c_resume"] / costs["c_full_block"], 2), number(mask["report"]["heldout_agreement"], 2),
                     number(lossy["full_passes_per_token"] / slim, 2),
                     f"{number(none['rejection_rate'], 2)} -> {number(lossy['rejection_rate'], 2)}",
                     f"{number(none['mean_accepted_length'], 2)} -> {number(1 / slim, 2)}",
                     number(lossy["full_equivalent_per_token"] / none["full_equivalent_per_token"], 2)])
    return "\n".join(markdown_table(header, body))


def paper_conditions(model, escalation: float, resumed_share: float = 0.5) -> dict[str, float]:
    """What a lossy tier must reach for the paper's speed-ups on a target priced by ``model`` (a
    :class:`viasd_adapt.bench.projection.CostModel`), with gamma = 5, the cost model's drafter, its
    slim pass at its measured skip ratio, q escalating on ``escalation`` of the cycles and resuming
    with ``resumed_share`` of its layers (a mask whose first skipped layer is that deep).

    Per cycle the tier pays gamma drafter passes, one slim pass and ``escalation`` resumed q passes;
    untiered SD pays gamma drafter passes and one q block pass; AR one one-token pass per token. The
    tier's cost per token is its cost per cycle over the tokens it commits per cycle, so each
    speed-up is a number of tokens the tier must commit per cycle.
    """
    c_single = 1.0 / model.block_over_single
    drafting = PAPER_GAMMA * model.draft_over_single * c_single
    tier = drafting + model.slim_over_block + escalation * model.layer_share_cost(resumed_share)
    untiered = drafting + 1.0
    return {"tier_cycle": tier, "untiered_cycle": untiered, "c_single": c_single,
            **{f"tokens_for_{x}x_ar": x * tier / c_single for x in PAPER_SPEEDUP_OVER_AR},
            **{f"tokens_over_sd_for_{g}x": g * tier / untiered for g in PAPER_GAIN_OVER_SD}}


def render_paper_conditions(load: Loader) -> str:
    """The tokens per cycle a lossy tier needs, on the shipped H200 7B cost model, for the paper's
    speed-ups, at each escalation rate of :data:`ESCALATION_RATES`."""
    from viasd_adapt.bench.projection import load_cost_model

    model = load_cost_model(PROJECTION_COSTS)
    low, high = PAPER_SPEEDUP_OVER_AR
    small, large = PAPER_GAIN_OVER_SD
    header = ["escalation rate", "tier cost per cycle (full block passes)",
              f"tokens per cycle for {low:g}x / {high:g}x AR (at most {PAPER_GAMMA + 1})",
              f"tokens per cycle over untiered SD's for +{small - 1:.0%} / +{large - 1:.0%}"]
    body = []
    for rate in ESCALATION_RATES:
        need = paper_conditions(model, rate)
        body.append([f"{rate:g}", number(need["tier_cycle"], 2),
                     f"{number(need[f'tokens_for_{low}x_ar'], 1)} / {number(need[f'tokens_for_{high}x_ar'], 1)}",
                     f"{number(need[f'tokens_over_sd_for_{small}x'], 2)}x / {number(need[f'tokens_over_sd_for_{large}x'], 2)}x"])
    sample = paper_conditions(model, 0.0)
    lines = markdown_table(header, body)
    lines += ["", f"Cost model: {model.label} (`viasd_adapt/assets/costs/{PROJECTION_COSTS}.json`): a one-token q pass "
              f"{number(sample['c_single'], 3)} of a block pass, a drafter pass {number(model.draft_over_single, 2)} of a "
              f"one-token q pass, the slim pass {number(model.slim_over_block, 2)} at r = {model.slim_ratio:g}, q resumed "
              f"from half depth {number(model.layer_share_cost(0.5), 2)}; untiered SD costs "
              f"{number(sample['untiered_cycle'], 2)} per cycle."]
    return "\n".join(lines)


#: The shipped pairs whose ``tuned.json`` the shipped-choices table reads, in order.
SHIPPED_PAIRS: tuple[str, ...] = ("demo", "demo-ee", "smollm2")

#: How the shipped-choices table names each choice ``viasd tune`` writes.
CHOICE_NAMES = {"ar": "the target alone (`ar`)", "none": "untiered SD (`none`)", "lenient": "lenient",
                "lossless-fixed": "lossless (the fixed tier, `lossless-fixed`)", "lossless": "lossless (the adaptive tier)",
                "lossy-fixed": "lossy VIA-SD (the fixed tier, `lossy-fixed`)", "lossy": "lossy VIA-SD (the adaptive tier)"}


def render_shipped_choices(load: Loader, assets: Path = REPO / "viasd_adapt" / "assets") -> str:
    """What each shipped pair's ``tuned.json`` runs by default: its choice, the settings that
    choice reads, and its measured cost beside the cheapest drafting point's, read from the files
    themselves (``load`` is unused: the files are the shipped assets)."""
    from viasd_adapt.config.schema import read_json

    header = ["pair", "tuned choice (what every command runs by default)", "settings it reads",
              "full-equivalent passes/token when tuned", "drafter it was tuned with"]
    body = []
    for pair in SHIPPED_PAIRS:
        tuned = read_json(assets / pair / "tuned.json", "tuned settings file")
        choice, settings = tuned["choice"], tuned["settings"]
        reads = {"lenient": f"lenience {settings['lenience']:g}, gamma {settings['gamma']}",
                 "lossy": f"alpha1 {settings['alpha1']:g}, alpha2 {settings['alpha2']:g}, gamma {settings['gamma']}",
                 "ar": "-"}.get(choice.removesuffix("-fixed"), f"gamma {settings['gamma']}")
        measured = (tuned.get("measured") or {}).get("full_equivalent")
        drafter = tuned.get("drafter")
        drafter = "prompt lookup" if drafter == "prompt-lookup" else (
            f"{drafter['num_layers']}-layer drafter model" if isinstance(drafter, dict) else "not recorded")
        body.append([f"`{pair}`", CHOICE_NAMES.get(choice, f"`{choice}`"), reads,
                     number(measured) if choice != "ar" else
                     f"{number(_ar_cost(tuned))} (the cheapest drafting point: {number(measured)})",
                     drafter])
    return "\n".join(markdown_table(header, body) + [
        "", "Read from `viasd_adapt/assets/<pair>/tuned.json` by `benchmarks/render_tables.py`; each file also holds "
            "the fidelity budget and the best point of every family within it."])


def _ar_cost(tuned: dict) -> float | None:
    """The target alone's cost in a tuned file whose choice is ``ar``, priced from the tune's own
    forward costs as the tuner priced it."""
    from viasd_adapt.config.tuned import plain_decoding_cost

    return plain_decoding_cost((tuned.get("report") or {}).get("costs") or {})


#: Every rendered table: name -> (the Markdown file it sits in, how to render it).
TABLES: dict[str, tuple[str, Callable[[Loader], str]]] = {
    "verdict": ("README.md", render_verdict),
    **{name: ("docs/results.md", (lambda table: lambda load: render_bench(table, load))(table))
       for name, table in BENCH_TABLES.items()},
    **{name: ("docs/results.md", (lambda table: lambda load: render_tasks(table, load))(table))
       for name, table in TASK_TABLES.items()},
    "adaptive": ("docs/results.md", render_adaptive),
    "paper-measured": ("docs/paper.md", render_paper_measured),
    "paper-conditions": ("docs/paper.md", render_paper_conditions),
    "shipped-choices": ("docs/tuning.md", render_shipped_choices),
}

def report_names() -> list[str]:
    """Every report the tables read, by file name under ``benchmarks/results/``."""
    names = [row.report for row in VERDICT_ROWS]
    names += [name for table in BENCH_TABLES.values() for name, _ in table.reports]
    names += [table.report for table in TASK_TABLES.values()] + [name for _, name in ADAPTIVE_REPORTS]
    return list(dict.fromkeys(names))


# ----------------------------------------------------------------------------- the Markdown files


def markers(name: str) -> tuple[str, str]:
    return (f"<!-- rendered: {name} (benchmarks/render_tables.py) -->", f"<!-- end rendered: {name} -->")


def written(text: str, name: str) -> str:
    """What ``text`` holds between the table's markers (ValueError if they are not there once each)."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the markers of table {name!r} are missing, repeated or out of order")
    return text[text.index(start) + len(start):text.index(end)].strip("\n")


def replaced(text: str, name: str, table: str) -> str:
    start, end = markers(name)
    written(text, name)
    return text[:text.index(start) + len(start)] + "\n" + table + "\n" + text[text.index(end):]


def differing(root: Path = REPO, load: Loader | None = None) -> list[str]:
    """The tables whose Markdown differs from what the reports render, as ``"FILE: NAME"``."""
    load = load or load_from(root / "benchmarks" / "results")
    return [f"{path}: {name}" for name, (path, render) in TABLES.items()
            if written((root / path).read_text(), name) != render(load)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its reports")
    args = parser.parse_args(argv)
    if args.check:
        stale = differing()
        for entry in stale:
            print(f"differs from its reports: {entry}", file=sys.stderr)
        return 1 if stale else 0
    load = load_from(RESULTS)
    for name, (path, render) in TABLES.items():
        file = REPO / path
        file.write_text(replaced(file.read_text(), name, render(load)))
        print(f"wrote {name} in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
