"""A flag the chosen mode does not read is refused by the name typed (``--mode lenient
--no-adaptive`` changed nothing, and ``--explain`` listed it as applied), whichever layer chose the
mode: the flag, the pair's tuned.json, ``--framework ar``. The control: the same flag with a mode
that reads it runs, and ``--explain`` credits it to the flag."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli


def generate(*args, pair="demo"):
    return CliRunner().invoke(cli, ["generate", "--pair", str(pair), "--framework", "engine", "--prompt", "x",
                                    "--max-new-tokens", "2", "--no-color", *map(str, args)])


def table(output: str) -> dict[str, str]:
    return {line.split()[0]: line for line in output.splitlines() if line.startswith("  ")}


UNREAD = [("lenient", ["--no-adaptive"], "--no-adaptive"), ("none", ["--adaptive"], "--adaptive"),
          ("audit", ["--no-adaptive"], "--no-adaptive"), ("lossy", ["--lenience", 0.3], "--lenience 0.3"),
          ("lossless", ["--alpha1", 0.2], "--alpha1 0.2"), ("lenient", ["--alpha2", 0.1], "--alpha2 0.1"),
          ("none", ["--preset", "conservative"], "--preset conservative")]


@pytest.mark.parametrize("mode, flag, typed", UNREAD, ids=[f"{m} {t}" for m, _, t in UNREAD])
def test_a_flag_the_mode_does_not_read_is_refused_by_name(mode, flag, typed):
    result = generate("--mode", mode, *flag, "--explain")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {typed}: mode {mode} (from flag --mode)") and "Traceback" not in result.output
    assert "flag --" not in "".join(table(result.output).values())  # --explain lists nothing as applied


READ = [("lossless", ["--no-adaptive"], "adaptive", "False"), ("lossy", ["--adaptive"], "adaptive", "True"),
        ("lenient", ["--lenience", 0.3], "lenience", "0.3"), ("audit", ["--alpha1", 0.2], "alpha1", "0.2"),
        ("lossy", ["--alpha2", 0.1], "alpha2", "0.1")]


@pytest.mark.parametrize("mode, flag, name, value", READ, ids=[f"{m} {f[0]}" for m, f, _, _ in READ])
def test_the_control_a_flag_the_mode_reads_runs_and_is_credited_to_the_flag(mode, flag, name, value):
    result = generate("--mode", mode, *flag, "--explain")
    assert result.exit_code == 0, result.output
    assert table(result.output)[name].split()[1:3] == [value, "flag"], result.output


def test_a_mode_from_the_tuned_file_is_held_to_the_same_rule(tuned_pair):
    """The pair's tuned choice is lenient (tests/support/tuned.py): --alpha1 would change nothing there."""
    result = generate("--alpha1", 0.2, pair=tuned_pair)
    assert result.exit_code == 2 and "error: --alpha1 0.2: mode lenient (from tuned.json" in result.output, result.output
    assert generate("--lenience", 0.3, pair=tuned_pair).exit_code == 0  # the control: lenient reads its tolerance


def test_a_framework_without_a_tier_refuses_the_adaptive_flag_by_its_own_name():
    for framework in ("ar", "lookup"):
        result = CliRunner().invoke(cli, ["generate", "--pair", "demo", "--framework", framework, "--no-adaptive",
                                          "--prompt", "x", "--max-new-tokens", "2"])
        assert result.exit_code == 2 and f"--no-adaptive: --framework {framework} cannot use tier settings" in result.output

