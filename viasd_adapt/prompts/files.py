"""Reading prompt files: the one reader behind ``viasd bench --prompts`` and ``viasd search --calib``.

Format (the same for both commands):

* a JSON list of strings (the file's first non-blank character is ``[``), newlines inside the
  strings as JSON writes them; or
* one prompt per non-empty line, where the two characters ``\\n`` stand for a newline inside a
  prompt (write ``\\\\n`` for a literal backslash followed by ``n``).

Blank prompts are dropped; a file with none left is an error (benchmarking or searching a mask on
no data would silently give an arbitrary answer). A file that is missing, a directory, unreadable,
not UTF-8, or binary (NUL bytes) gets one clear :class:`~viasd_adapt.errors.ConfigError`.
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


__all__ = ["read_prompts_file"]
