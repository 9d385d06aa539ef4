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


def undescribed_options(command: click.Command, path: tuple[str, ...] = ()) -> list[str]:
    """Every visible option of ``command`` and its subcommands whose ``--help`` line has no description,
    as ``"viasd SUBCOMMAND --option"``."""
    found = []
    for sub_path, sub in _commands(command, path):
        for param in sub.params:
            if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip():
                found.append(" ".join(("viasd", *sub_path, param.opts[0])))
    return found


def test_every_option_of_every_command_has_a_description():
    """Each command's and subcommand's --help describes every option it shows; control: a command with
    an option without help is flagged, and its hidden options are not."""
    @click.group()
    def group():
        pass

    @group.command()
    @click.option("--described", help="Says what it does.")
    @click.option("--bare", type=int, default=0, show_default=True)
    @click.option("--secret", hidden=True)
    def sub(described, bare, secret):
        pass

    assert undescribed_options(group) == ["viasd sub --bare"]

    seen = [" ".join(path) for path, _ in _commands(cli)]
    assert {"models build", "models list", "bench", "tune", "search", "demo", "generate"} <= set(seen)
    assert undescribed_options(cli) == []


def _help(*path: str) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=400)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_help_texts_say_what_the_commands_do():
    """The search's budget bound follows --price; the default strategy is the guided search, not DIMR;
    `viasd models` lists shipped and real pairs too; `models build --threads` takes any count."""
    from viasd_adapt.search.config import DEFAULTS

    search = _help("search")
    assert DEFAULTS.strategy == "guided" and DEFAULTS.price == "cycle"
    assert "--cycle-cost for cycle (the default), --slim-cost for marginal" in search
    assert "DIMR: search" not in search
    assert "the guided search by default" in search
    assert "DIMR mask" not in _help("tune") and "DIMR mask" not in _help("bench")
    assert "self-trained" not in _help("models")
    assert "1<=x<=2" not in _help("models", "build")
    result = CliRunner().invoke(cli, ["models", "build", "--threads", "0"])
    assert result.exit_code == 2 and "1<=x<=1024" in result.output  # control: the bound that stays is shown (1 to MAX_THREADS)
