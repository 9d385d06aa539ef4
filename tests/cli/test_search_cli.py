"""``viasd search`` end to end on tiny random checkpoints written to disk, and its input errors."""

from __future__ import annotations


import pytest
import torch
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.search_record import SearchMeasurements, SearchRecord
from viasd_adapt.routing.mask import load_mask


def char_tokenizer(vocab_size: int = 96, shift: int = 0):
    """A character-level tokenizer with ``vocab_size`` ids (``shift`` permutes the ids)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(32 + i) for i in range(vocab_size - 1)]
    vocab = {c: (i + shift) % (vocab_size - 1) for i, c in enumerate(chars)}
    vocab["<unk>"] = vocab_size - 1
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")


#: A chat template for the character tokenizer: the roles in angle brackets, then the assistant's turn.
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def save_model(path, family, seed, num_layers, vocab_size=96, shift=0, chat_template=None):
    tiny_model(family, seed=seed, num_layers=num_layers, vocab_size=vocab_size).save_pretrained(path)
    tokenizer = char_tokenizer(vocab_size, shift)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {
        "target": save_model(root / "target", "qwen2", 0, 6),
        "draft": save_model(root / "draft", "qwen2", 1, 1),
        "draft_vocab": save_model(root / "draft_vocab", "qwen2", 1, 1, vocab_size=128),
        "draft_tok": save_model(root / "draft_tok", "qwen2", 1, 1, shift=3),
        "chat_target": save_model(root / "chat_target", "qwen2", 0, 6, chat_template=CHAT_TEMPLATE),
        "root": root,
    }


@pytest.fixture()
def calib(tmp_path):
    path = tmp_path / "calib.txt"
    path.write_text("def add(a, b):\nclass Point:\nfor i in range(10):\n")
    return path


def run(args):
    return CliRunner().invoke(cli, ["search", *map(str, args)])


def test_search_writes_artifact_plot_and_summary(checkpoints, calib, tmp_path):
    out, plot = tmp_path / "m" / "mask.json", tmp_path / "conv.png"
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
                  "--strategy", "dimr", "--steps", 7, "--bo-every", 3, "--seed", 2, "--ratio", 0.5, "--new-tokens", 4,
                  "--heldout-prompts", 2, "--compare-random", 3, "--out", out, "--plot", plot,
                  "--no-progress", "--threads", 1])
    assert result.exit_code == 0, result.output
    assert "DIMR: best mask skips" in result.output and "7 evaluations (2 BO)" in result.output
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(checkpoints["target"], dtype=torch.float32)
    artifact = load_mask(out, target)
    assert artifact.mask.num_skipped == 3 and artifact.delta is not None
    search, report = artifact.search, artifact.report  # typed sections
    assert isinstance(search, SearchRecord) and isinstance(report, SearchMeasurements)
    assert search.seed == 2 and search.calibration.calib_file == "calib.txt"  # outside the working folder: its name
    assert search.calibration.source == "file, its last 2 prompts held out" and search.calibration.prompt_seed == 2
    assert len(report.random_compare.costs) == 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert search.target == "target" and search.total_wall_seconds > 0
    assert report.random_compare.count == 3 and report.heldout_tau == 2 * 4
    assert (search.steps, search.bo_every, search.patience, search.seed, search.min_observations) == (7, 3, 40, 2, 2)


def test_guided_search_reuses_its_calibration_windows(checkpoints, calib, tmp_path):
    out = tmp_path / "mask.json"
    args = ["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib, "--steps", 12,
            "--seed", 1, "--ratio", 0.5, "--new-tokens", 4, "--heldout-prompts", 2, "--out", out, "--force",
            "--no-progress", "--threads", 1]
    first = run(args)
    assert first.exit_code == 0, first.output
    assert "12 evaluations (6 probes" in first.output
    assert (tmp_path / "mask.windows.pt").is_file()
    report = MaskArtifact.load(out).report
    assert report.time.window_cache.misses == 2 and report.probe_evaluations == 6
    again = run(args)
    assert again.exit_code == 0, again.output
    report = MaskArtifact.load(out).report
    assert report.time.window_cache.hits == 2 and report.time.window_cache.misses == 0


def test_budget_space_priced_per_cycle(checkpoints, calib, tmp_path):
    out = tmp_path / "mask.json"
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib, "--space", "budget",
                  "--cycle-cost", 0.9, "--escalation-rate", 0.5, "--steps", 10, "--new-tokens", 4, "--heldout-prompts", 1,
                  "--out", out, "--no-progress", "--threads", 1, "--no-window-cache"])
    assert result.exit_code == 0, result.output
    artifact = MaskArtifact.load(out)
    assert artifact.search.space.price == "cycle" and artifact.search.space.escalation_rate == 0.5
    bits = tuple(artifact.mask.bits())
    s1 = bits.index(0)
    assert sum(bits) + 0.5 * (6 - s1) <= 0.9 * 6 + 1e-9  # slim layers + e x resumed layers within the budget
    assert 0.0 <= artifact.report.escalation_estimate <= 1.0 and artifact.report.cycle_price > 0
    assert not (tmp_path / "mask.windows.pt").exists()
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib, "--space", "budget",
                  "--cycle-cost", 0.1, "--escalation-rate", 1.0, "--heldout-prompts", 1, "--out", tmp_path / "none.json",
                  "--no-progress"])
    assert result.exit_code == 2 and "raise --cycle-cost" in result.output


def test_unwritable_out_fails_before_loading_anything(tmp_path, calib):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    # the model paths do not exist: the error must be about --out, so it came first
    result = run(["--target", tmp_path / "nope", "--draft", tmp_path / "nope", "--out", blocker / "mask.json"])
    assert result.exit_code == 2 and "--out" in result.output and "not writable" in result.output
    result = run(["--target", tmp_path / "nope", "--draft", tmp_path / "nope", "--out", tmp_path])
    assert result.exit_code == 2 and "is a directory" in result.output


@pytest.mark.parametrize("ratio", ["0", "1", "1.5", "-0.1"])
def test_ratio_outside_unit_interval(tmp_path, ratio):
    result = run(["--target", tmp_path, "--draft", tmp_path, "--ratio", ratio, "--out", tmp_path / "m.json"])
    assert result.exit_code == 2 and "(0, 1)" in result.output


def test_too_many_or_no_skipped_layers(checkpoints, calib, tmp_path):
    common = ["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
              "--heldout-prompts", 1, "--out", tmp_path / "m.json", "--no-progress"]
    result = run([*common, "--ratio", 0.95])  # round(5.7) = 6 of 6 layers
    assert result.exit_code == 2 and "at least one layer must remain" in result.output
    result = run([*common, "--ratio", 0.05])  # round(0.3) = 0 layers
    assert result.exit_code == 2 and ("skips no layer" in result.output or "at least one layer" in result.output)


def test_empty_calibration_file(checkpoints, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", empty,
                  "--out", tmp_path / "m.json"])
    assert result.exit_code == 2 and "empty" in result.output


@pytest.mark.parametrize("draft, message", [("draft_vocab", "vocabulary mismatch"), ("draft_tok", "tokenizers have different vocabularies")])
def test_mismatched_drafter(checkpoints, calib, tmp_path, draft, message):
    result = run(["--target", checkpoints["target"], "--draft", checkpoints[draft], "--calib", calib,
                  "--heldout-prompts", 1, "--out", tmp_path / "m.json", "--no-progress"])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "m.json").exists()


def test_search_runs_the_one_config_with_its_defaults(checkpoints, tmp_path, monkeypatch):
    """The flags not given are the config's defaults (DEFAULTS), not a second set in the CLI."""
    from dataclasses import replace

    import viasd_adapt.search.pipeline as pipeline
    from viasd_adapt.errors import ConfigError
    from viasd_adapt.search.config import DEFAULTS

    calib = tmp_path / "many.txt"  # more prompts than the default --heldout-prompts holds out
    calib.write_text("".join(f"x = {i}\n" for i in range(DEFAULTS.calibration.n_heldout + 2)))
    seen = {}

    def stop(target, draft, tokenizer, config, **kwargs):
        seen.update(config=config, **kwargs)
        raise ConfigError("stopped before the search")

    monkeypatch.setattr(pipeline, "search_pair", stop)
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
                  "--out", tmp_path / "m.json", "--no-progress"])
    assert result.exit_code == 2 and "stopped before the search" in result.output
    assert seen["config"] == DEFAULTS.with_(calibration=replace(DEFAULTS.calibration, calib_file=calib))
    assert seen["prompt_lookup"] is False and seen["info"].out == tmp_path / "m.json"
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
                  "--out", tmp_path / "m.json", "--no-progress", "--strategy", "dimr", "--ratio", 0.3, "--seed", 5,
                  "--heldout-prompts", 0, "--compare-random", 2])
    assert seen["config"] == DEFAULTS.with_(strategy="dimr", ratio=0.3, seed=5, compare_random=2,
                                            calibration=replace(DEFAULTS.calibration, calib_file=calib, n_heldout=0))
    run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
         "--out", tmp_path / "m.json", "--no-progress", "--chat", "off"])
    assert seen["config"] == DEFAULTS.with_(calibration=replace(DEFAULTS.calibration, calib_file=calib, chat="off"))


# ---------------------------------------------------------------------------- prompts: --chat, held-out, names


@pytest.fixture()
def captured(monkeypatch):
    """The prompt ids and config ``viasd search`` hands to the search stages (which then stop)."""
    import viasd_adapt.search.pipeline as pipeline
    from viasd_adapt.errors import ConfigError

    seen = {}

    def stop(target, draft, ids, config, info, *args, **kwargs):
        seen.update(ids=ids, config=config, info=info)
        raise ConfigError("stopped before the search")

    monkeypatch.setattr(pipeline, "run_stages", stop)
    return seen


@pytest.fixture()
def five_prompts(tmp_path):
    path = tmp_path / "five.txt"
    path.write_text("def add(a, b):\nclass Point:\nfor i in range(10):\nimport os\nx = [1, 2]\n")
    return path


def encoded(path, texts, chat):
    from transformers import AutoTokenizer

    from viasd_adapt.prompts.chat import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(path)
    return [encode_prompt(tokenizer, text, chat) for text in texts]


def test_a_calibration_file_holds_out_its_own_tail(checkpoints, five_prompts, tmp_path, captured):
    """The held-out agreement is measured on the file's last --heldout-prompts prompts, not on
    stdlib snippets: prompts of the same kind as the calibration."""
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", five_prompts,
                  "--heldout-prompts", 2, "--out", tmp_path / "m.json", "--no-progress"])
    assert result.exit_code == 2 and "stopped before the search" in result.output
    lines = five_prompts.read_text().splitlines()
    assert captured["ids"].calib_ids == encoded(checkpoints["target"], lines[:3], "off")
    assert captured["ids"].heldout_ids == encoded(checkpoints["target"], lines[3:], "off")
    assert captured["info"].calibration_info["source"] == "file, its last 2 prompts held out"


def test_a_calibration_file_too_short_to_hold_out_is_refused_before_any_model_loads(five_prompts, tmp_path):
    result = run(["--target", tmp_path / "nope", "--draft", tmp_path / "nope", "--calib", five_prompts,
                  "--heldout-prompts", 5, "--out", tmp_path / "m.json"])
    assert result.exit_code == 2
    assert "has 5 prompts; more than --heldout-prompts (5) are needed" in result.output


@pytest.mark.parametrize("chat, template", [("auto", True), ("on", True), ("off", False)])
def test_chat_puts_file_prompts_through_the_targets_template(checkpoints, five_prompts, tmp_path, captured, chat,
                                                               template):
    """--chat as generate, bench and tune have it: a --calib FILE calibration on a chat target goes
    through the chat template (auto, on), or not (off); the artifact records which."""
    result = run(["--target", checkpoints["chat_target"], "--draft", checkpoints["draft"], "--calib", five_prompts,
                  "--heldout-prompts", 1, "--chat", chat, "--out", tmp_path / "m.json", "--no-progress"])
    assert result.exit_code == 2 and "stopped before the search" in result.output
    lines = five_prompts.read_text().splitlines()
    ids = captured["ids"]
    assert ids.calib_ids == encoded(checkpoints["chat_target"], lines[:4], "on" if template else "off")
    assert ids.heldout_ids == encoded(checkpoints["chat_target"], lines[4:], "on" if template else "off")
    assert ids.calib_ids[0] != encoded(checkpoints["chat_target"], lines[:1], "off" if template else "on")[0]
    assert captured["info"].calibration_info["source"].endswith(", chat template") == template
    assert captured["config"].calibration.chat == chat


def test_chat_on_without_a_template_is_refused(checkpoints, calib, tmp_path):
    result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", calib,
                  "--heldout-prompts", 1, "--chat", "on", "--out", tmp_path / "m.json", "--no-progress"])
    assert result.exit_code == 2 and "--chat on" in result.output and "no chat template" in result.output
    assert not (tmp_path / "m.json").exists()


def test_the_artifact_names_the_calibration_file_relative_to_the_working_folder(checkpoints, five_prompts, tmp_path,
                                                                                monkeypatch):
    """No machine path in an artifact: a file inside the working folder by its relative name, one
    outside it by its name alone."""
    inside = tmp_path / "prompts" / "calib.txt"
    inside.parent.mkdir()
    inside.write_text(five_prompts.read_text())
    monkeypatch.chdir(tmp_path)
    for given, recorded in ((inside, "prompts/calib.txt"), (five_prompts, "five.txt")):
        out = tmp_path / "masks" / f"{given.stem}.json"
        result = run(["--target", checkpoints["target"], "--draft", checkpoints["draft"], "--calib", given,
                      "--heldout-prompts", 1, "--strategy", "dimr", "--steps", 3, "--new-tokens", 2, "--out", out,
                      "--no-progress", "--no-window-cache", "--threads", 1])
        assert result.exit_code == 0, result.output
        assert MaskArtifact.load(out).search.calibration.calib_file == recorded
        assert str(tmp_path) not in out.read_text()
