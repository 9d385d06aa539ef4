"""EAGLE rows of ``viasd bench`` on a tiny pair with a briefly trained head."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("eagle.model.ea_model")

from tests.support.expected_warnings import junk_drafter_warning  # noqa: E402
from tests.support.pairs import CHAR_PROMPTS as PROMPTS  # noqa: E402
from viasd_adapt.cli.main import cli  # noqa: E402
from viasd_adapt.training.eagle_head import train_eagle_head  # noqa: E402


def test_eagle_rows_plain_none_and_tiers(tmp_path, char_pair):
    pair = char_pair
    head = train_eagle_head(pair / "target", tmp_path / "head", seed=0, steps=10, batch_size=2, seq_len=32, max_train_chars=20_000)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS[:1]))
    out = tmp_path / "bench.json"
    args = ["bench", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--eagle-head", str(head),
            "--frameworks", "eagle", "--modes", "lossy", "--prompts", str(prompts), "--max-new-tokens", "6",
            "--repeats", "1", "--task-prompts", "1", "--json", str(out)]
    # a head of 10 training steps: over the 24 tokens of the next-line task its 40+ judged drafts are
    # far more surprising to the slim verifier than its own samples (the monitor's judged-drafts rule)
    with junk_drafter_warning("eagle"):
        res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    rows = {(r["framework"], r["mode"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {("ar", "-"), ("eagle", "plain"), ("eagle", "none"), ("eagle", "lossy"), ("eagle", "lossy-fixed")}
    assert rows[("eagle", "plain")]["greedy_agreement"] == 1.0  # EAGLE unpatched is lossless
    assert rows[("eagle", "none")]["greedy_agreement"] == 1.0
    for mode in ("none", "lossy"):  # passes come from the tier's metrics (plain eagle keeps none)
        row = rows[("eagle", mode)]
        assert row["full_passes_per_token"] > 0 and row["draft_passes_per_token"] > 0  # its own base copy + head
    for mode in ("plain", "none", "lossy", "lossy-fixed"):
        assert rows[("eagle", mode)]["analytic_bound"] is None  # the block-cost model does not describe a tree
    # the fixed tier runs the slim verifier on every cycle; the default (adaptive) row may stay untiered
    # for a 6-token answer, which is the adaptive tier's choice, not the bench's
    assert rows[("eagle", "lossy-fixed")]["slim_passes_per_token"] > 0
    assert rows[("eagle", "none")]["slim_passes_per_token"] == 0


def test_eagle_without_head_is_skipped_with_a_reason(tmp_path, char_pair):
    pair = char_pair
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS[:1]))
    args = ["bench", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--frameworks", "eagle",
            "--modes", "none", "--prompts", str(prompts), "--max-new-tokens", "4", "--repeats", "1", "--task-prompts", "0"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "eagle: SKIPPED (needs an EAGLE head (--eagle-head PATH" in res.output
