"""Bad command-line input gets one line on stderr and exit code 2, never a traceback or a silent run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli

GENERATE = ["generate", "--prompt", "def f", "--max-new-tokens", "2", "--framework", "engine", "--mode", "lossy"]


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert lines and lines[-1].startswith(("error:", "Error:")), result.output
    return lines[-1]


@pytest.mark.parametrize("option, name", [("--top-p", "--top-p"), ("--alpha1", "alpha1"), ("--lenience", "lenience")])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_numbers_are_refused(option, name, value):
    line = _one_line_error(CliRunner().invoke(cli, [*GENERATE, option, value]))
    assert name in line and value in line


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_bad_temperature_is_refused(value):
    line = _one_line_error(CliRunner().invoke(cli, [*GENERATE, "--temperature", value]))
    assert "temperature" in line


def test_arguments_that_are_not_utf8_are_refused_by_position():
    # Python passes undecodable argv bytes on as lone surrogates (b"\xff" -> "\udcff").
    result = CliRunner().invoke(cli, ["generate", "--prompt", "\udcff\udcfe abc", "--max-new-tokens", "2"])
    line = _one_line_error(result)
    assert "argument 3" in line and "not valid UTF-8" in line


def test_models_build_threads_zero_is_refused():
    line = _one_line_error(CliRunner().invoke(cli, ["models", "build", "--recipe", "tiny", "--threads", "0"]))
    assert "--threads" in line
