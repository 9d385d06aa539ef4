"""Turning a bench result into the printed tables, the JSON document and the plot."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator

from viasd_adapt.bench.prices import format_price_list
from viasd_adapt.bench.run import ROW_FIELDS, BenchResult
from viasd_adapt.core.settings import renamed_row
from viasd_adapt.io import save_figure, write_json
from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.schema import Artifact, SparseRecord, load_artifact

BENCH_FORMAT = "viasd-adapt/bench"
BENCH_VERSION = 3  # 3: the bare lossless/lossy rows are adaptive, the fixed tier is -fixed


class PromptSumsRecord(SparseRecord):
    """A row's sums per prompt, repeats pooled (:func:`viasd_adapt.bench.run.prompt_sums`): what the
    verdict's bootstrap over prompts resamples (:mod:`viasd_adapt.bench.uncertainty`). Absent from reports
    written before it existed; their verdict states no uncertainty."""

    tokens: list[float]
    cost: list[float]
    passes: dict[str, list[float]] | None = None
    log_likelihood: list[float] | None = None
    regret: list[float] | None = None
    overruled: list[float] | None = None
    audited: list[float] | None = None
    keys: list[str] | None = None  # each prompt's identity: copies are counted once (older reports: none)


class BenchRow(SparseRecord):
    """One row of the bench: a framework in a mode, its medians. The columns every reader uses are
    typed; the others (:data:`~viasd_adapt.bench.run.ROW_FIELDS`) ride along as they were written."""

    framework: str
    mode: str  # "-" for the ar row, "plain", or a tier mode
    full_equivalent_per_token: float | None = None
    tokens_per_s: float | None = None
    speedup_vs_ar: float | None = None
    ll_drop: float | None = None
    regret: float | None = None
    overrule_rate: float | None = None
    per_prompt: PromptSumsRecord | None = None  # optional: older reports have none


class BenchRun(SparseRecord):
    """How the bench was run: the command, the pair, the settings, the budget and the verdict."""

    command: str = ""
    label: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)
    tuned: dict[str, Any] | None = None
    mask: dict[str, Any] | None = None
    prompts: int | None = None
    max_new_tokens: int | None = None
    repeats: int | None = None
    max_ll_drop: float | None = None
    max_regret: float | None = None
    max_overrule: float | None = None
    verdict: list[str] = Field(default_factory=list)


class BenchReport(Artifact):
    """``viasd bench --json``: typed and versioned (version 2), read back by :func:`load_bench_report`."""

    FORMAT: ClassVar[str] = BENCH_FORMAT
    VERSION: ClassVar[int] = BENCH_VERSION
    WHAT: ClassVar[str] = "bench report"

    run: BenchRun = Field(default_factory=BenchRun)
    environment: dict[str, Any] = Field(default_factory=dict)
    rows: list[BenchRow] = Field(default_factory=list)
    costs_seconds: dict[str, Any] = Field(default_factory=dict)
    #: the run's one price list: every forward kind's rounds, medians and spread (None: an older report)
    prices: dict[str, Any] | None = None
    full_equivalent_formula: str = ""
    analytic_bound_formula: str = ""
    peak_mem_source: str = ""
    frameworks: dict[str, str] = Field(default_factory=dict)
    skipped_frameworks: dict[str, str] = Field(default_factory=dict)
    wall_seconds: float | None = None
    prompt_lengths: list[int] = Field(default_factory=list)
    task_prompts: int = 0
    groups: dict[str, list[BenchRow]] = Field(default_factory=dict)
    group_sizes: dict[str, int] = Field(default_factory=dict)
    #: where the rows were measured (:mod:`viasd_adapt.config.hardware`); None in reports written before it was recorded
    hardware: HardwareStamp | None = None

    @model_validator(mode="before")
    @classmethod
    def _rows_by_todays_names(cls, data: Any) -> Any:
        """A report of version 2 or less named the fixed tier ``lossless``/``lossy`` and the adaptive
        tier ``-adaptive``: read under today's names (:func:`~viasd_adapt.core.settings.renamed_row`).
        Only a file says its version (it always carries ``format``); a report built in memory is today's."""
        if not isinstance(data, dict) or "format" not in data or not isinstance(data.get("version", 1), int) \
                or data.get("version", 1) >= 3:
            return data

        def renamed(rows: Any) -> Any:
            if not isinstance(rows, list):
                return rows
            return [{**row, "mode": renamed_row(row["mode"])} if isinstance(row, dict) and isinstance(row.get("mode"), str)
                    else row for row in rows]

        data = {**data, "rows": renamed(data.get("rows"))}
        projection = (data.get("run") or {}).get("projection") if isinstance(data.get("run"), dict) else None
        if isinstance(projection, dict) and isinstance(projection.get("rows"), list):
            data["run"] = {**data["run"], "projection": {**projection, "rows": renamed(projection["rows"])}}
        if isinstance(data.get("groups"), dict):
            data["groups"] = {name: renamed(rows) for name, rows in data["groups"].items()}
        return data


def load_bench_report(path: str | os.PathLike) -> BenchReport:
    """A ``viasd bench --json`` file, its fields typed; errors name the file and the field."""
    return load_artifact(path, BenchReport)

# (header, field, format); None values print as "-".
SPEED_COLUMNS = (
    ("row", None, None),
    ("rej", "rejection_rate", "{:.3f}"),
    ("acc_len", "mean_accepted_length", "{:.2f}"),
    ("tau", "tau", "{:.2f}"),
    ("full/tok", "full_passes_per_token", "{:.3f}"),
    ("resumed/tok", "resumed_passes_per_token", "{:.3f}"),
    ("slim/tok", "slim_passes_per_token", "{:.3f}"),
    ("tier", "tier_share", "{:.2f}"),
    ("draft/tok", "draft_passes_per_token", "{:.2f}"),
    ("feq/tok", "full_equivalent_per_token", "{:.3f}"),
    ("tok/s", "tokens_per_s", "{:.1f}"),
    ("x_ar", "speedup_vs_ar", "{:.2f}"),
    ("x_untiered", "speedup_vs_untiered", "{:.2f}"),
    ("bound", "analytic_bound", "{:.2f}"),
    ("%bound", "fraction_of_bound", "{:.0%}"),
    ("mem_MB", "peak_mem_mb", "{:.1f}"),
)
FIDELITY_COLUMNS = (
    ("row", None, None),
    ("target_LL", "target_ll", "{:.3f}"),
    ("LL_drop", "ll_drop", "{:+.3f}"),
    ("regret", "regret", "{:.3f}"),
    ("agree", "greedy_agreement", "{:.3f}"),
    ("identical", "identical_outputs", "{:.3f}"),
    ("argmax_agree", "target_argmax_agreement", "{:.3f}"),
    ("overrule", "overrule_rate", "{:.3f}"),
    ("ovr_t1", "overrule_tier1", "{:.3f}"),
    ("ovr_t2", "overrule_tier2", "{:.3f}"),
    ("ovr_t3", "overrule_tier3", "{:.3f}"),
    ("tv", "tv_distance", "{:.3f}"),
    ("next_line", "next_line_match", "{:.3f}"),
)
# Spec-Bench's per-task report: tau (mean accepted tokens) and speedup over AR, with our cost and fidelity.
TASK_COLUMNS = (
    ("row", None, None),
    ("tau", "tau", "{:.2f}"),
    ("x_ar", "speedup_vs_ar", "{:.2f}"),
    ("tok/s", "tokens_per_s", "{:.1f}"),
    ("feq/tok", "full_equivalent_per_token", "{:.3f}"),
    ("slim/tok", "slim_passes_per_token", "{:.3f}"),
    ("tier", "tier_share", "{:.2f}"),
    ("LL_drop", "ll_drop", "{:+.3f}"),
    ("regret", "regret", "{:.3f}"),
    ("agree", "greedy_agreement", "{:.3f}"),
    ("identical", "identical_outputs", "{:.2f}"),
    ("overrule", "overrule_rate", "{:.3f}"),
)
MODE_COLOURS = {"-": "#7f7f7f", "plain": "#bcbd22", "none": "#1f77b4", "lenient": "#ff7f0e", "lossless": "#2ca02c",
                "lossy": "#d62728", "audit": "#9467bd", "lossless-fixed": "#98df8a", "lossy-fixed": "#ff9896"}


def row_label(row: dict) -> str:
    return row["framework"] if row["mode"] == "-" else f"{row['framework']}/{row['mode']}"


def _cell(row: dict, field: str | None, fmt: str | None) -> str:
    if field is None:
        return row_label(row)
    value = row.get(field)
    return "-" if value is None else fmt.format(value)


def format_table(rows: list[dict], columns=SPEED_COLUMNS) -> str:
    """A fixed-width text table, one line per row."""
    cells = [[header for header, _, _ in columns]] + [[_cell(r, f, fmt) for _, f, fmt in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = []
    for n, line in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_group_tables(result: BenchResult, columns=TASK_COLUMNS) -> str:
    """One table per group (Spec-Bench task) and one for all prompts, each from the same runs."""
    blocks = [f"[{group}] ({count} prompt(s))\n{format_table(rows, columns)}"
              for group, rows in result.groups.items()
              for count in [result.group_sizes.get(group, 0)]]
    blocks.append(f"[overall] ({len(result.prompt_lengths)} prompt(s))\n{format_table(result.rows, columns)}")
    return "\n\n".join(blocks)


def format_costs(result: BenchResult) -> str:
    c = result.costs

    def ms(value):
        return "-" if value is None else f"{value * 1e3:.2f} ms ({value / c.c_full_block:.2f})"

    return (
        f"per-forward costs (median, context {c.context_length} tokens; in parentheses: fraction of a full block pass): "
        f"drafter 1 tok {ms(c.c_draft)}, slim {c.block_length} tok {ms(c.c_slim)}, "
        f"resumed full {c.block_length} tok {ms(c.c_resume)}, full {c.block_length} tok {c.c_full_block * 1e3:.2f} ms, "
        f"full 1 tok {ms(c.c_full)}\n"
        "feq/tok = full-equivalent passes per token (every pass priced by its measured cost, in full block passes); "
        "bound = c_full / forward time per token; %bound = x_ar / bound"
    ) + (f"\n{format_price_list(result.prices)}" if result.prices is not None else "")


def environment() -> dict[str, Any]:
    import transformers

    device = f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else f"cpu: {platform.processor() or platform.machine()}"
    return {
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def result_json(result: BenchResult, run_info: dict[str, Any]) -> dict[str, Any]:
    """The bench's JSON document, built through :class:`BenchReport` (so what is written is what
    :func:`load_bench_report` reads)."""
    rows = [{key: row.get(key) for key in ROW_FIELDS} | {"repeats": row.get("repeats")}
            | ({"per_prompt": row["per_prompt"]} if row.get("per_prompt") is not None else {}) for row in result.rows]
    return BenchReport.model_validate({
        "run": run_info,
        "environment": environment(),
        "rows": rows,
        "costs_seconds": result.costs.to_dict(),
        "prices": result.prices.to_dict() if result.prices is not None else None,
        "full_equivalent_formula": "(draft*c_draft + slim*c_slim + (full-resumed)*c_full_block + resumed*c_resume "
        "+ single*c_full) / c_full_block, per generated token",
        "analytic_bound_formula": "c_full / (forward time per token); max() of drafting and verifying for overlapped frameworks",
        "peak_mem_source": result.memory_source,
        "frameworks": result.descriptions,
        "skipped_frameworks": result.skipped,
        "wall_seconds": result.wall_seconds,
        "prompt_lengths": result.prompt_lengths,
        "task_prompts": result.task_prompts,
        "groups": {group: [{key: row.get(key) for key in ROW_FIELDS} for row in rows] for group, rows in result.groups.items()},
        "group_sizes": result.group_sizes,
        "hardware": result.hardware,
    }).to_json()


def save_json(path: str | Path, data: dict[str, Any]) -> Path:
    return write_json(path, data, what="bench JSON")


def plot_rows(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """One PNG: speedup over autoregressive (bound marked), full-equivalent passes per token, and
    each row's cost against its fidelity (target log-likelihood drop)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row_label(r) for r in rows]
    colours = [MODE_COLOURS.get(r["mode"], "#333333") for r in rows]
    x = range(len(rows))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(max(12, 1.2 * len(rows) + 6), 4.8))
    ax1.bar(x, [r["speedup_vs_ar"] or 0.0 for r in rows], color=colours)
    bounds = [(i, r["analytic_bound"]) for i, r in zip(x, rows) if r["analytic_bound"]]
    ax1.scatter([i for i, _ in bounds], [b for _, b in bounds], marker="_", s=400, color="black", label="analytic bound", zorder=3)
    ax1.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax1.set_ylabel("tokens/s relative to autoregressive (median)")
    ax1.legend(loc="upper left", fontsize=8)
    ax2.bar(x, [r["full_equivalent_per_token"] or 0.0 for r in rows], color=colours)
    ax2.set_ylabel("full-equivalent passes per token (lower is cheaper)")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    for r, colour, label in zip(rows, colours, labels):
        if r["full_equivalent_per_token"] is not None and r["ll_drop"] is not None:
            ax3.scatter(r["full_equivalent_per_token"], r["ll_drop"], color=colour, s=30)
            ax3.annotate(label, (r["full_equivalent_per_token"], r["ll_drop"]), fontsize=6, xytext=(3, 3),
                         textcoords="offset points")
    ax3.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ax3.set_xlabel("full-equivalent passes per token")
    ax3.set_ylabel("target log-likelihood drop per token (lower is more faithful)")
    ax3.set_title("cost vs fidelity", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


__all__ = ["BENCH_FORMAT", "BENCH_VERSION", "BenchReport", "BenchRow", "BenchRun", "PromptSumsRecord", "FIDELITY_COLUMNS", "SPEED_COLUMNS", "load_bench_report", "TASK_COLUMNS", "environment", "format_costs", "format_group_tables",
           "format_table", "plot_rows",
           "result_json", "row_label", "save_json"]
