"""Turning a bench result into the printed table, the JSON file and the goal summary."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch

from viasd_adapt.bench.goals import GoalCheck
from viasd_adapt.bench.run import ROW_FIELDS, BenchResult
from viasd_adapt.errors import ViasdError

# (header, field, format); None values print as "-".
COLUMNS = (
    ("row", None, None),
    ("rej", "rejection_rate", "{:.3f}"),
    ("acc_len", "mean_accepted_length", "{:.2f}"),
    ("full/tok", "full_passes_per_token", "{:.3f}"),
    ("slim/tok", "slim_passes_per_token", "{:.3f}"),
    ("tok/s", "tokens_per_s", "{:.1f}"),
    ("x_ar", "speedup_vs_ar", "{:.2f}"),
    ("x_untiered", "speedup_vs_untiered", "{:.2f}"),
    ("agree", "greedy_agreement", "{:.3f}"),
    ("argmax_agree", "target_argmax_agreement", "{:.3f}"),
    ("mem_MB", "peak_mem_mb", "{:.1f}"),
    ("bound", "analytic_bound", "{:.2f}"),
    ("%bound", "fraction_of_bound", "{:.0%}"),
    ("overrule", "overrule_rate", "{:.3f}"),
    ("tv", "tv_distance", "{:.3f}"),
)


def _cell(row: dict, field: str | None, fmt: str | None) -> str:
    if field is None:
        return row["framework"] if row["mode"] == "-" else f"{row['framework']}/{row['mode']}"
    value = row.get(field)
    return "-" if value is None else fmt.format(value)


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table, one line per row."""
    cells = [[header for header, _, _ in COLUMNS]] + [[_cell(r, f, fmt) for _, f, fmt in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = []
    for n, line in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_costs(result: BenchResult) -> str:
    c = result.costs
    slim = "-" if c.c_slim is None else f"{c.c_slim * 1e3:.2f} ms"
    return (
        f"per-forward costs (median, context {c.context_length} tokens): drafter 1 tok {c.c_draft * 1e3:.2f} ms, "
        f"slim {c.block_length} tok {slim}, target {c.block_length} tok {c.c_full_block * 1e3:.2f} ms, "
        f"target 1 tok {c.c_full * 1e3:.2f} ms\n"
        "bound = c_full / (draft/tok * c_draft + slim/tok * c_slim + full/tok * c_full_block); "
        "%bound = x_ar / bound"
    )


def format_goals(checks: list[GoalCheck]) -> str:
    lines = []
    for check in checks:
        status = {True: "MET", False: "MISSED", None: "n/a"}[check.met]
        value = "-" if check.value is None else f"{check.value:.3f}"
        note = f"  ({check.note})" if check.note else ""
        lines.append(f"  [{status:6s}] {check.framework}: {check.goal} = {value} (goal {check.threshold}){note}")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    device = "cuda: " + torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu: {platform.processor() or platform.machine()}"
    import transformers

    return {
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def result_json(result: BenchResult, checks: list[GoalCheck], run_info: dict[str, Any]) -> dict[str, Any]:
    rows = [{key: row.get(key) for key in ROW_FIELDS} | {"repeats": row.get("repeats")} for row in result.rows]
    return {
        "format": "viasd-adapt/bench",
        "version": 1,
        "run": run_info,
        "environment": environment(),
        "rows": rows,
        "costs_seconds": result.costs.to_dict(),
        "analytic_bound_formula": "c_full / (draft_passes_per_token*c_draft + slim_passes_per_token*c_slim + "
        "full_passes_per_token*c_full_block); max() of drafting and verifying for overlapped frameworks",
        "peak_mem_source": result.memory_source,
        "frameworks": result.descriptions,
        "skipped_frameworks": result.skipped,
        "goals": [c.to_dict() for c in checks],
        "wall_seconds": result.wall_seconds,
        "prompt_lengths": result.prompt_lengths,
    }


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
    except OSError as err:
        raise ViasdError(f"cannot write {path}: {err.strerror or err}") from None
    return path
