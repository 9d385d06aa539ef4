"""``viasd generate --framework pearl`` works for every mode, and matches ``ar`` when lossless."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.support.pairs import noisy_pair, save_pair_dir
from viasd_adapt.cli.main import cli
from viasd_adapt.training.tokenizer import train_tokenizer


TEXTS = ["the cat sat on the mat.\n", "a dog ran in the park.\n", "the sun is warm today.\n"] * 20


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    tokenizer = train_tokenizer(TEXTS, 320)
    target, draft, mask = noisy_pair(vocab_size=len(tokenizer), noise=0.25)  # the mask skips the damped layer 3
    return save_pair_dir(tmp_path_factory.mktemp("pearl-pair"), target, draft, tokenizer, mask,
                         eos_token_id=tokenizer.eos_token_id)


def generate(root, out_json, framework, mode, *extra):
    drafter = [] if framework == "ar" else ["--draft", root / "draft", "--mask", root / "mask.json"]  # ar uses neither
    args = ["generate", "--framework", framework, "--target", root / "target", *drafter,
            "--mode", mode, "--prompt", "the cat", "--max-new-tokens", 12,
            "--json", out_json, "--no-color", *extra]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(out_json.read_text()), result.output


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_pearl_runs_from_the_command_line(pair_dir, tmp_path, mode):
    fixed = ("--no-adaptive",) if mode in ("lossless", "lossy") else ()  # the tier on every cycle: it must run
    data, output = generate(pair_dir, tmp_path / "out.json", "pearl", mode, *fixed)
    m = data["metrics"]
    assert 1 <= len(data["tokens"]) <= 12 and m["committed"] == len(data["tokens"]) == len(data["tiers"])
    assert m["draft_tokens"] + m["slim_tokens"] + m["full_tokens"] == m["committed"]
    assert (m["slim_passes"] > 0) == (mode != "none")
    assert (m["overrule_rate"] is not None) == (mode == "audit")
    assert "note: PEARL (" in output and "pre-verify" in output


def test_pearl_cli_greedy_matches_ar_and_sampling_runs(pair_dir, tmp_path):
    ar, _ = generate(pair_dir, tmp_path / "ar.json", "ar", "none")
    for mode in ("none", "lossless"):
        pearl, _ = generate(pair_dir, tmp_path / f"{mode}.json", "pearl", mode)
        assert pearl["tokens"] == ar["tokens"]
    sampled, _ = generate(pair_dir, tmp_path / "t.json", "pearl", "lossless", "--temperature", 0.8, "--seed", 3)
    again, _ = generate(pair_dir, tmp_path / "t2.json", "pearl", "lossless", "--temperature", 0.8, "--seed", 3)
    assert sampled["tokens"] == again["tokens"]  # seeded: reproducible across runs and threads
