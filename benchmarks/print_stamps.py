"""Prints the hardware stamp (``hardware``: where a file was measured) of every JSON file in the
folders given: ``mask.json``, ``tuned.json``, an onboarding's ``report.json``, a bench's JSON. A
file without one says so (written before stamps existed, or by a step that failed).

    python benchmarks/print_stamps.py ~/.cache/viasd-adapt/my-pair gpu_results
"""

from __future__ import annotations

import sys
from pathlib import Path

from viasd_adapt.config.schema import read_json
from viasd_adapt.errors import ConfigError
from viasd_adapt.io import json_text


def stamp_of(data) -> dict | None:
    """The file's ``hardware`` object: at the top, else in the first entry that has one (a bench
    file merged per framework)."""
    if isinstance(data, dict):
        if isinstance(data.get("hardware"), dict):
            return data["hardware"]
        entries = data.values()
    elif isinstance(data, list):
        entries = data
    else:
        return None
    return next((entry["hardware"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("hardware"), dict)),
                None)


def main(folders: list[str]) -> int:
    files = [path for folder in folders for path in sorted(Path(folder).glob("*.json"))]
    for path in files:
        try:
            stamp = stamp_of(read_json(path, "JSON file"))
        except ConfigError as err:
            print(f"  {path}: unreadable ({err})")
            continue
        print(f"  {path.name}: " + (json_text(stamp, indent=None).strip() if stamp else "no hardware field"))
    if not files:
        print("  (no JSON files in " + ", ".join(folders) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
