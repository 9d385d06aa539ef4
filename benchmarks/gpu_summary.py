"""A short text summary of a ``gpu_check.sh`` output folder (whatever of it exists).

    python benchmarks/gpu_summary.py gpu_results
"""

from __future__ import annotations

import sys
from pathlib import Path

from viasd_adapt.config.schema import read_json
from viasd_adapt.errors import ConfigError


def load(folder: Path, name: str):
    path = folder / name
    if not path.is_file():
        return None
    try:
        return read_json(path, name)
    except ConfigError as err:
        return {"error": f"unreadable {name}: {err}"}


def lossless(data) -> list[str]:
    lines = ["lossless identity (fraction of prompts token-identical to the target's greedy output):"]
    for dtype, entry in data.get("dtypes", {}).items():
        if "error" in entry:
            lines.append(f"  {dtype}: ERROR {entry['error']}")
            continue
        parts = [f"{name} {m['identical']}/{m['total']}" + (" ERROR" if "error" in m else "")
                 for name, m in entry.get("methods", {}).items()]
        lines.append(f"  {dtype}: mask loads: {entry.get('mask_loads')}; " + ", ".join(parts))
    return lines


def pearl(data) -> list[str]:
    lines = ["PEARL profile (wall seconds per repetition, 48 tokens):"]
    for name, value in data.get("sections", {}).items():
        if name.startswith("generations_") and isinstance(value, dict):
            if "error" in value:
                lines.append(f"  {name}: ERROR {value['error']}")
                continue
            walls = {k: v["wall_s"] for k, v in value.items() if isinstance(v, dict)}
            lines.append(f"  {name[12:]}: {walls}, rounds {value.get('sequential', {}).get('rounds')}, "
                         f"same tokens {value.get('all_configurations_same_tokens')}")
    gil = data.get("sections", {}).get("gil_float16")
    if isinstance(gil, dict) and "launch_slowdown" in gil:
        lines.append(f"  GIL: drafter launch {gil['alone']['launch_ms']:.3f} ms alone, "
                     f"{gil['with_target_thread']['launch_ms']:.3f} ms beside a target thread ({gil['launch_slowdown']:.2f}x)")
    for name, value in data.get("sections", {}).items():
        if name.startswith("forwards_") and isinstance(value, dict) and "error" not in value:
            cells = ", ".join(f"{k} {v.get('ms')} ms/{v.get('kernel_launches', '?')} launches" for k, v in value.items())
            lines.append(f"  {name[9:]}: {cells}")
    return lines


def costs(data) -> list[str]:
    lines = ["forward costs (ms, fraction of the full block pass):"]
    for shape in data.get("shapes", []):
        cells = ", ".join(f"{r['row']}{'' if r.get('s1') is None else '@s1=' + str(r['s1'])} {r['ms']:.2f} "
                          f"({r['fraction_of_full_block']:.2f})" for r in shape["rows"])
        lines.append(f"  {shape['shape']} {shape['dtype']} {shape['attn']}: {cells}")
    return lines


def bench(data) -> list[str]:
    lines = ["bench (per framework file; rows with the fields the bench reported):"]
    for framework, content in data.items():
        rows = content.get("rows") if isinstance(content, dict) else None
        if not isinstance(rows, list):
            lines.append(f"  {framework}: {str(content)[:200]}")
            continue
        for row in rows:
            if isinstance(row, dict):
                keys = ("row", "name", "tokens_per_s", "speedup_vs_ar", "bound_fraction", "percent_of_bound", "agreement")
                lines.append("  " + framework + ": " + ", ".join(f"{k}={row[k]}" for k in keys if k in row))
    return lines


def main(argv: list[str]) -> None:
    folder = Path(argv[0] if argv else "gpu_results")
    out: list[str] = []
    for name, render in (("lossless.json", lossless), ("bench.json", bench), ("pearl_profile.json", pearl),
                         ("forward_costs.json", costs)):
        data = load(folder, name)
        if data is None:
            out.append(f"{name}: missing")
        elif "error" in data and len(data) == 1:
            out.append(data["error"])
        else:
            try:
                out += render(data)
            except Exception as err:  # a summary must never hide the files
                out.append(f"{name}: cannot summarise ({type(err).__name__}: {err})")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
