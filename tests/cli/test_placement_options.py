"""Every command that loads a model takes ``--device``, ``--dtype`` and ``--device-map``, the shared ones.

Which commands load a model is read from the click commands themselves, not from a list: a command
loads a model when it takes ``--pair`` or ``--target`` (every way of naming a model the commands
have). Each such command must carry the three options of :data:`viasd_adapt.cli.options.PLACEMENT_OPTIONS`
with their one definition (type, default, help), so a new command that forgets them, or defines
its own ``--device`` with another meaning, fails here. Controls: a toy command with ``--target``
and no placement options is flagged, and so is one whose ``--device`` is its own.

Then the options at work: bad values end in one line before any model loads, and the char pair run
with ``--device-map auto`` writes what it writes with ``--device cpu``.
"""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from tests.support.pairs import save_char_pair
from viasd_adapt.cli.main import cli
from viasd_adapt.cli.options import placement_options

PLACEMENT_NAMES = ("--device", "--dtype", "--device-map")
MODEL_NAMING = ("--pair", "--target")


def walk(command: click.Command, path: tuple[str, ...] = ()):
    """``(path, command)`` of ``command`` and every command below it (lazy groups loaded)."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1] if path else "viasd")
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), path + (name,))


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: param for param in command.params if isinstance(param, click.Option) for opt in param.opts}


def loads_a_model(command: click.Command) -> bool:
    """Whether a command names a model to load: it takes ``--pair`` or ``--target``."""
    return any(opt in _options(command) for opt in MODEL_NAMING)


def _definition(option: click.Option) -> tuple:
    return type(option.type).__name__, getattr(option.type, "choices", None), option.default, option.help


@placement_options
def _shared_command(**kwargs):  # the shared definitions, as a command carries them
    pass


SHARED = {opt: _definition(option) for opt, option in _options(click.command()(_shared_command)).items()}


def missing_placement(root: click.Command) -> dict[str, list[str]]:
    """``{command path: what is wrong}`` for every model-loading command under ``root`` that lacks one
    of the placement options or carries one defined otherwise than the shared one."""
    found = {}
    for path, command in walk(root):
        if not isinstance(command, click.Group) and loads_a_model(command):
            options = _options(command)
            wrong = [name if name not in options else f"{name} (not the shared definition)"
                     for name in PLACEMENT_NAMES if name not in options or _definition(options[name]) != SHARED[name]]
            found[" ".join(path)] = wrong
    return found


def test_every_command_that_loads_a_model_takes_the_shared_placement_options():
    found = missing_placement(cli)
    assert {"generate", "search", "tune", "bench", "demo", "models add"} <= set(found)  # the criterion finds them
    assert "models list" not in found  # and only commands that load a model
    assert {path: wrong for path, wrong in found.items() if wrong} == {}


def test_control_a_new_command_without_them_or_with_its_own_device_is_flagged():
    group = click.Group("toy")

    @group.command("run")
    @click.option("--target")
    def run(target):
        pass

    @group.command("own")
    @click.option("--pair")
    @click.option("--device", default="cpu", help="cpu only.")
    @click.option("--dtype")
    @click.option("--device-map")
    def own(pair, device, dtype, device_map):
        pass

    @group.command("good")
    @click.option("--target")
    @placement_options
    def good(target, device, dtype, device_map):
        pass

    @group.command("plain")
    def plain():
        pass

    assert missing_placement(group) == {
        "run": list(PLACEMENT_NAMES),
        "own": [f"{name} (not the shared definition)" for name in PLACEMENT_NAMES],
        "good": [],
    }


@pytest.mark.parametrize("command", [["generate"], ["search"], ["tune"], ["bench"], ["demo"], ["models", "add", "x"]])
@pytest.mark.parametrize("options, message", [
    (["--device", "cuda"], "error: --device cuda needs CUDA, and this torch sees no CUDA device"),
    (["--device", "cuda:5"], "error: --device cuda:5 needs CUDA"),
    (["--device", "cpu", "--device-map", "auto"], "error: --device-map auto places every layer itself, and --device cpu"),
    (["--device", "gpu"], "'gpu' is not a device: use auto, cpu, cuda or cuda:N"),
    (["--dtype", "int8"], "'int8' is not one of 'auto', 'float32', 'bfloat16', 'float16'"),
    (["--device-map", "everywhere"], "'everywhere' is not one of 'auto', 'balanced'"),
])
def test_a_bad_placement_is_one_line_before_any_model_loads(command, options, message, tmp_path, monkeypatch):
    import torch

    pair = save_char_pair(tmp_path / "char", with_mask=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    models = ["--target", str(pair / "target"), "--draft", str(pair / "draft")] if command[0] != "demo" else []
    if command[0] == "search":
        models += ["--out", str(tmp_path / "m.json")]
    if command[0] == "tune":
        models += ["--out", str(tmp_path / "t.json")]
    if command[0] == "models":
        models += ["--out", str(tmp_path / "pairs")]
    result = CliRunner().invoke(cli, [*command, *models, *options])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "pairs").exists()


def test_cuda_n_beyond_the_gpus_is_refused_naming_how_many_there_are(monkeypatch):
    import torch

    from viasd_adapt.errors import ConfigError
    from viasd_adapt.models.placement import check_device, placement

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"^--device cuda:5: this machine has 1 CUDA device\(s\), cuda:0 to cuda:0$"):
        check_device("cuda:5")
    assert check_device("cuda:0") == torch.device("cuda", 0) and check_device("auto").type == "cuda"
    with pytest.raises(ConfigError, match="--device-map auto places every layer itself, and --device cuda:1"):
        placement("cuda:1", device_map="auto")
    assert placement("cuda", device_map="auto").device == torch.device("cuda", 0)  # cuda: the map over the GPUs


def test_generate_with_a_device_map_writes_what_it_writes_on_the_cpu(tmp_path):
    pair = save_char_pair(tmp_path / "char", with_mask=True)
    outputs = []
    for options in (["--device", "cpu"], ["--device-map", "auto"], ["--dtype", "float32"]):
        path = tmp_path / f"out{len(outputs)}.json"
        result = CliRunner().invoke(cli, ["generate", "--target", str(pair / "target"), "--draft", str(pair / "draft"),
                                          "--framework", "hf", "--mode", "lossless", "--mask", str(pair / "mask.json"), "--prompt", "def f(x):",
                                          "--max-new-tokens", "12", "--no-show-tiers", "--json", str(path), *options])
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(path.read_text())["tokens"])
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) == 12
