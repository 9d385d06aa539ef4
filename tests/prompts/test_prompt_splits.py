"""The prompts room: one function per named split, each reproducible and kept apart from the others,
the pairs-file reader, and the room's independence (torch-free, importing nothing above it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.prompts import spec_bench, splits
from viasd_adapt.prompts.files import read_pairs_file
from viasd_adapt.prompts.stdlib import heldout_prompts

# ---------------------------------------------------------------------------- stdlib snippets


def test_the_snippet_splits_are_reproducible_and_kept_apart():
    bench = splits.bench_snippets(splits.BENCH_DEFAULT_SNIPPETS)
    assert bench == splits.bench_snippets(splits.BENCH_DEFAULT_SNIPPETS) and splits.bench_snippets(3) == bench[:3]
    assert all(200 <= len(text) <= 400 for text in bench)
    tune = splits.tune_snippets(6)
    assert len(tune) == 6 and tune == splits.tune_snippets(6) and not set(tune) & set(bench)
    calib, heldout = splits.search_snippets(4, 3, seed=0)
    assert (len(calib), len(heldout)) == (4, 3) and not set(calib) & set(heldout)
    assert calib + heldout == heldout_prompts(7, seed=0)  # one draw, cut in two
    assert splits.search_snippets(4, 3, seed=1) != (calib, heldout)
    assert 120 <= len(splits.demo_snippet()) <= 240 and splits.demo_snippet() == splits.demo_snippet()
    seeds = (splits.BENCH_SNIPPET_SEED, splits.TUNE_SNIPPET_SEED, splits.DEMO_SNIPPET_SEED)
    assert len(set(seeds)) == 3 and 1 not in seeds  # seed 1 is the bench's next-line task


def test_the_tune_snippets_leave_out_every_default_bench_snippet_even_when_the_draws_meet(monkeypatch):
    """The tune's draw drops any of the bench's default snippets, whatever the seeds draw."""
    drawn = {splits.BENCH_SNIPPET_SEED: [f"b{i}" for i in range(8)],
             splits.TUNE_SNIPPET_SEED: ["b1", "t0", "b5", "t1", "t2"]}

    def draw(n, seed=0, min_chars=200, max_chars=400, root=None):
        return drawn[seed][:n]

    with monkeypatch.context() as patch:
        patch.setattr(splits, "heldout_prompts", draw)
        assert splits.tune_snippets(3) == ["t0", "t1", "t2"]


# ---------------------------------------------------------------------------- Spec-Bench


def test_the_spec_bench_splits_read_their_own_questions():
    bench = splits.bench_questions(spec_bench.PREFIX, 2)
    assert bench and all(q.split == "bench" for q in bench)
    assert {q.task for q in bench} == set(spec_bench.TASKS) and len(bench) == 2 * len(spec_bench.TASKS)
    tune = splits.tune_questions(7)  # ceil(7 / 6) = 2 per task
    assert all(q.split == "calibration" for q in tune) and len(tune) == 2 * len(spec_bench.TASKS)
    calib, heldout = splits.search_question_texts(spec_bench.PREFIX, 6, 6)
    calibration_turns = {q.turns[0] for q in spec_bench.select(spec_bench.PREFIX, split="calibration")}
    assert set(calib) | set(heldout) <= calibration_turns and not set(calib) & set(heldout)
    by_text = {q.turns[0]: q.task for q in spec_bench.load_questions()}
    assert {by_text[t] for t in calib} == set(spec_bench.TASKS)  # round-robin: every task in the first six
    assert {by_text[t] for t in heldout} == set(spec_bench.TASKS)
    assert not {q.turns[0] for q in bench} & calibration_turns
    with pytest.raises(ConfigError, match="calibration questions; 90 \\+ 10 requested"):
        splits.search_question_texts(spec_bench.PREFIX, 90, 10)


# ---------------------------------------------------------------------------- files


def test_a_search_file_holds_out_its_last_prompts_and_pairs(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a\nb\nc\n")
    assert splits.search_prompt_file(prompts, 1) == (["a", "b"], ["c"])
    with pytest.raises(ConfigError, match=r"has 3 prompts; more than --heldout-prompts \(3\) are needed"):
        splits.search_prompt_file(prompts, 3)
    pairs = tmp_path / "p.tsv"
    pairs.write_text("s1\tt1\ns2\ns3\tt3\n")
    assert splits.search_pairs_file(pairs, 2) == ([("s1", "t1")], [("s2", None), ("s3", "t3")])
    with pytest.raises(ConfigError, match=r"has 3 pairs; more than --heldout-prompts \(4\)"):
        splits.search_pairs_file(pairs, 4)


def test_pair_files_in_three_formats_and_their_errors(tmp_path):
    rows = [{"source": "def f(x): return x", "target": "Identity."}, {"source": "def g(): pass"}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "b.json").write_text(json.dumps(rows))
    (tmp_path / "c.tsv").write_text("def f(x): return x\tIdentity.\ndef g(): pass\n")
    expected = [("def f(x): return x", "Identity."), ("def g(): pass", None)]
    for name in ("a.jsonl", "b.json", "c.tsv"):
        assert read_pairs_file(tmp_path / name) == expected
    (tmp_path / "empty.tsv").write_text("\n\n")
    with pytest.raises(ConfigError, match="empty"):
        read_pairs_file(tmp_path / "empty.tsv")
    (tmp_path / "bad.jsonl").write_text('{"target": "no source"}\n')
    with pytest.raises(ConfigError, match="no non-empty 'source'"):
        read_pairs_file(tmp_path / "bad.jsonl")
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(ConfigError, match="does not parse"):
        read_pairs_file(tmp_path / "broken.json")
    with pytest.raises(ViasdError, match="not found"):
        read_pairs_file(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------- the room


def test_the_prompts_room_is_torch_free():
    code = ("import sys, viasd_adapt.prompts.splits, viasd_adapt.prompts.chat, viasd_adapt.prompts.files; "
            "print('torch' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "False"


def test_the_prompts_room_imports_nothing_above_it():
    """Layering: the prompts room sits below everything but errors and io; the corpus reads its
    snippets from here, never the other way round."""
    from tests.core.test_import_graph import import_graph

    graph = import_graph()
    room = {m: deps for m, deps in graph.items() if m == "viasd_adapt.prompts" or m.startswith("viasd_adapt.prompts.")}
    assert "viasd_adapt.prompts.splits" in room
    allowed = {"viasd_adapt.errors", "viasd_adapt.io"}
    outside = {f"{m} -> {d}" for m, deps in room.items() for d in deps if d not in allowed and d not in room}
    assert not outside, outside
    assert "viasd_adapt.prompts.stdlib" in graph["viasd_adapt.training.corpus"]
