"""Reading prompt files: the one reader behind ``viasd bench --prompts`` and ``viasd search --calib``,
and the reader of source -> target pairs behind ``viasd search --calib-pairs``.

Prompts files (the same format for both commands):

* a JSON list of strings (the file's first non-blank character is ``[``), newlines inside the
  strings as JSON writes them; or
* one prompt per non-empty line, where the two characters ``\\n`` stand for a newline inside a
  prompt (write ``\\\\n`` for a literal backslash followed by ``n``).

Blank prompts are dropped; a file with none left is an error (benchmarking or searching a mask on
no data would silently give an arbitrary answer). A file that is missing, a directory, unreadable,
not UTF-8, or binary (NUL bytes) gets one clear :class:`~viasd_adapt.errors.ConfigError`.

Pairs files (:func:`read_pairs_file`) hold what an encoder-decoder target reads (a source) and,
optionally, what it should write (a target): JSON Lines or a JSON list of ``{"source": ...,
"target": ...}`` objects, or tab-separated ``source<TAB>target`` lines.
"""

from __future__ import annotations

import json
import os
import re

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import read_text

_ESCAPE = re.compile(r"\\\\|\\n")


def _unescape_line(line: str) -> str:
    return _ESCAPE.sub(lambda m: "\\" if m.group(0) == "\\\\" else "\n", line)


def read_prompts_file(path: str | os.PathLike, what: str = "prompts file") -> list[str]:
    """The prompts in ``path`` (module docstring); ``what`` names the file in errors
    (e.g. ``"calibration file"``)."""
    try:
        text = read_text(path, what)
    except ViasdError as err:
        raise ConfigError(str(err)) from None
    if "\x00" in text:
        raise ConfigError(f"{what} {path} is a binary file (it holds NUL bytes), not text")
    text = text.lstrip("\ufeff")  # a byte-order mark some editors write
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{what} {path} looks like JSON but does not parse: {err}") from None
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            raise ConfigError(f"{what} {path} must hold a JSON list of strings")
        prompts = list(data)
    else:
        prompts = [_unescape_line(line) for line in text.splitlines() if line.strip()]
    prompts = [prompt for prompt in prompts if prompt.strip()]
    if not prompts:
        raise ConfigError(f"{what} {path} is empty (holds no prompts): give one prompt per line or a JSON list of strings")
    return prompts


def read_pairs_file(path: str | os.PathLike) -> list[tuple[str, str | None]]:
    """(source, target) text pairs (module docstring; ``target`` optional).

    Sources are required and must be non-empty; an empty file is an error (a search on no data
    would return an arbitrary mask).
    """
    text = read_text(path, "calibration pairs file")
    stripped = text.strip()
    records: list = []
    if stripped.startswith("["):
        try:
            records = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise ConfigError(f"calibration pairs file {path} looks like JSON but does not parse: {err}") from None
        if not isinstance(records, list):
            raise ConfigError(f"calibration pairs file {path} must hold a JSON list of objects")
    elif stripped.startswith("{"):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{path}:{number} is not a JSON object: {err}") from None
    else:
        for line in text.splitlines():
            if line.strip():
                source, _, target = line.partition("\t")
                records.append({"source": source, "target": target if target.strip() else None})
    pairs = []
    for number, record in enumerate(records, 1):
        if not isinstance(record, dict) or not isinstance(record.get("source"), str) or not record["source"].strip():
            raise ConfigError(f"calibration pair {number} of {path} has no non-empty 'source' string")
        target = record.get("target")
        if target is not None and not isinstance(target, str):
            raise ConfigError(f"calibration pair {number} of {path} has a non-string 'target'")
        pairs.append((record["source"], target))
    if not pairs:
        raise ConfigError(f"calibration pairs file {path} is empty: give one source (and target) per line")
    return pairs


__all__ = ["read_pairs_file", "read_prompts_file"]
