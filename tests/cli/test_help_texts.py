"""Every command's ``--help`` reads as a user reads it: no default or range shows ``None``."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from viasd_adapt.cli.main import cli


def _commands(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, path + (name,))


def test_every_help_shows_defaults_and_ranges_without_none():
    seen = []
    for path, command in _commands(cli):
        seen.append(" ".join(path))
        result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=400)
        assert result.exit_code == 0, (path, result.output)
        bracketed = re.findall(r"\[[^\[\]]*\]", result.output)
        assert not [b for b in bracketed if "None" in b], (path, [b for b in bracketed if "None" in b])
        ctx = click.Context(command, info_name=path[-1] if path else "viasd")
        for param in command.params:
            if isinstance(param, click.Option):
                extra = param.get_help_extra(ctx)
                assert "None" not in str(extra.get("default", "")) and "None" not in str(extra.get("range", "")), (path, param.name, extra)
    assert {"models build", "generate", "bench", "tune", "search", "demo"} <= set(seen)  # subcommands of groups too


def test_an_unbounded_float_option_shows_no_range_and_a_bounded_one_shows_its_range():
    from viasd_adapt.cli.options import finite

    assert finite()._describe_range() == ""
    assert finite(min=0.0)._describe_range() == "x>=0.0"
    assert finite(min=0.0, max=1.0, max_open=True)._describe_range() == "0.0<=x<1.0"


def test_version_is_the_one_in_the_package_the_changelog_and_pyproject():
    """``viasd --version`` prints the package's version; the changelog's newest entry is that version,
    and pyproject.toml reads it from the package rather than stating its own."""
    import re

    from click.testing import CliRunner

    import viasd_adapt
    from tests.support import REPO_ROOT
    from viasd_adapt.cli.main import cli

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"viasd, version {viasd_adapt.__version__}"
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert re.findall(r"^## (\S+)", changelog, flags=re.M)[0] == viasd_adapt.__version__
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and not re.search(r'^version\s*=\s*"', pyproject, flags=re.M)
