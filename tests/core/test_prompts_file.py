"""The one prompts-file reader (bench --prompts, search --calib): formats and clear errors."""

from __future__ import annotations

import json
import os

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.prompts.files import read_prompts_file


def test_lines_json_bom_and_escapes(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("def f():\\n    return 1\n\n   \nprint('a\\\\nb')\n", encoding="utf-8")
    assert read_prompts_file(lines) == ["def f():\n    return 1", "print('a\\nb')"]
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(["a\nb", "  ", "c"]), encoding="utf-8")
    assert read_prompts_file(listed) == ["a\nb", "c"]
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffx = 1\n".encode("utf-8"))
    assert read_prompts_file(bom) == ["x = 1"]
    obj = tmp_path / "obj.txt"
    obj.write_text('{"a": 1}')
    assert read_prompts_file(obj) == ['{"a": 1}']  # not a list: a one-line prompt, as documented


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8"),
        (b"abc\x00def\n", "binary file"),
        (b"\xff\xfeh\x00i\x00", "not UTF-8"),  # UTF-16 text
        (b"", "empty"),
        (b"\n \n\t\n", "empty"),
        (b"[]", "empty"),
        (b"[1, 2]", "JSON list of strings"),
        (b"[\"a\", ", "does not parse"),
    ],
)
def test_bad_content_is_one_clear_config_error(tmp_path, content, message):
    path = tmp_path / "prompts.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as err:
        read_prompts_file(path, "calibration file")
    assert "calibration file" in str(err.value) and "\n" not in str(err.value)


def test_missing_directory_and_unreadable(tmp_path):
    with pytest.raises(ConfigError, match="prompts file not found"):
        read_prompts_file(tmp_path / "missing.txt")
    with pytest.raises(ConfigError, match="is a directory"):
        read_prompts_file(tmp_path)
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.txt"
        locked.write_text("x")
        locked.chmod(0)
        with pytest.raises(ConfigError, match="cannot read"):
            read_prompts_file(locked)
