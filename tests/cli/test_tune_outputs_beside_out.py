"""``viasd tune --out`` elsewhere: every file the tune writes (the tuned settings, the frontier, the
masks it searches) goes beside ``--out``, and the pair's own folder is left as it was. A shipped
pair's folder is inside the installed package: a re-tune must not rewrite its masks there."""

from __future__ import annotations

from click.testing import CliRunner

from viasd_adapt.cli.main import cli


def _listing(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_tune_with_out_elsewhere_writes_its_searched_masks_there_and_leaves_the_pair_alone(tmp_path, char_pair):
    before = _listing(char_pair)
    out = tmp_path / "elsewhere" / "tuned.json"
    args = ["tune", "--pair", str(char_pair), "--alpha1", "0", "--alpha2", "0", "--lenience", "0.3", "--greedy-gates", "top",
            "--prompts", "1", "--max-new-tokens", "4", "--gamma", "3", "--exits", "1",
            "--no-adaptive", "--out", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert out.is_file() and (out.parent / "mask-exit1.json").is_file()
    assert _listing(char_pair) == before  # control: the early-exit mask used to land beside the pair's mask
