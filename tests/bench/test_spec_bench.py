"""Spec-Bench in the product: the shipped questions, their fixed splits, chat-templated prompts
(MT-bench's second turn after the target's own first answer), and ``viasd bench --prompts
spec-bench`` reporting per task, with a prompt-lookup drafter."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from tests.support.pairs import char_pair_models, char_tokenizer, save_pair_dir
from viasd_adapt.prompts import spec_bench
from viasd_adapt.prompts.chat import encode_messages, encode_prompt, user_turns, uses_chat
from viasd_adapt.errors import ConfigError

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"


def test_the_shipped_questions_and_their_notice():
    questions = spec_bench.load_questions()
    assert len(questions) == 480
    assert Counter(q.task for q in questions) == {"mt_bench": 80, "translation": 80, "summarization": 80, "qa": 80,
                                                  "math_reasoning": 80, "rag": 80}
    assert all(len(q.turns) == (2 if q.task == "mt_bench" else 1) for q in questions)
    assert {"NOTICE.md", "LICENSE"} <= {p.name for p in spec_bench.data_dir().iterdir()}


def test_the_calibration_split_is_question_id_divisible_by_5_and_the_bench_never_reads_it():
    calibration = spec_bench.select(split="calibration")
    bench = spec_bench.select(split="bench")
    assert len(calibration) == 96 and len(bench) == 384
    assert all(q.question_id % 5 == 0 for q in calibration) and not any(q.question_id % 5 == 0 for q in bench)
    assert Counter(q.task for q in calibration) == {task: 16 for task in spec_bench.TASKS}
    assert Counter(q.category for q in calibration if q.task == "mt_bench") == {c: 2 for c in spec_bench.MT_BENCH_CATEGORIES}


def test_selection_by_task_and_category_round_robin():
    picked = spec_bench.select("spec-bench:mt_bench,qa", per_category=3)
    assert [q.category for q in picked] == ["writing", "roleplay", "reasoning", "qa", "qa", "qa"]
    assert [q.question_id for q in spec_bench.select("spec-bench:coding", per_category=2)] == [121, 122]
    assert len(spec_bench.select("spec-bench", per_category=2)) == 12
    with pytest.raises(ConfigError, match="unknown Spec-Bench category 'poetry'.*tasks: mt_bench"):
        spec_bench.select("spec-bench:qa,poetry")
    with pytest.raises(ConfigError, match="per-category"):
        spec_bench.select("spec-bench", per_category=0)


def _text(tokenizer, ids: list[int]) -> str:
    """The char tokenizer's text (its decode() puts spaces between tokens)."""
    return "".join(tokenizer.convert_ids_to_tokens(ids))


def test_chat_encoding_modes():
    tokenizer = char_tokenizer()
    plain = encode_prompt(tokenizer, "hi", "auto")
    assert plain == list(tokenizer("hi").input_ids)  # no template: auto is plain text
    with pytest.raises(ConfigError, match="no chat template"):
        encode_prompt(tokenizer, "hi", "on")
    tokenizer.chat_template = TEMPLATE
    templated = encode_prompt(tokenizer, "hi", "auto")
    assert _text(tokenizer, templated) == "user: hi\nassistant: "
    assert encode_prompt(tokenizer, "hi", "off") == plain
    conversation = encode_messages(tokenizer, user_turns(["a?", "b?"], ["A."]), "on")
    assert _text(tokenizer, conversation) == "user: a?\nassistant: A.\nuser: b?\nassistant: "
    with pytest.raises(ConfigError, match="2 user turns need 1 assistant answers"):
        user_turns(["a?", "b?"])
    with pytest.raises(ConfigError, match="--chat must be one of"):
        uses_chat(tokenizer, "maybe")


@pytest.fixture
def chat_pair(tmp_path):
    target, drafter = char_pair_models()
    tokenizer = char_tokenizer()
    tokenizer.chat_template = TEMPLATE
    return save_pair_dir(tmp_path / "pair", target, drafter, tokenizer, eos_token_id=1)


def test_mt_bench_second_turns_follow_the_targets_own_first_answer(chat_pair):
    from viasd_adapt.bench.prompt_sets import first_answer, question_prompts
    from viasd_adapt.models.pair import load_pair

    pair = load_pair(chat_pair / "target", "prompt-lookup", need_mask=False, device="cpu")
    question = spec_bench.select("spec-bench:writing", per_category=1)[0]
    first, second = question_prompts(pair, [question], "auto", 8)
    assert (first.group, second.group, second.label) == ("mt_bench", "mt_bench", f"q{question.question_id}/turn2")
    answer = first_answer(pair, first.ids, 8)
    text = _text(pair.tokenizer, second.ids)
    assert f"assistant: {answer}\nuser: {question.turns[1][:20]}" in text


def test_bench_reports_spec_bench_per_task_with_prompt_lookup(chat_pair, tmp_path):
    from viasd_adapt.cli.main import cli

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, [
        "bench", "--target", str(chat_pair / "target"), "--draft", "prompt-lookup",
        "--prompts", "spec-bench:qa,mt_bench", "--per-category", "1", "--frameworks", "hf,engine,pearl",
        "--modes", "none,lossless", "--repeats", "1", "--max-new-tokens", "6", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "per Spec-Bench task" in result.output and "[mt_bench] (2 prompt(s))" in result.output
    assert "pearl: SKIPPED (needs a drafter model" in result.output
    data = json.loads(out.read_text())
    assert data["run"]["prompts_source"] == "spec-bench:qa,mt_bench" and data["group_sizes"] == {"mt_bench": 2, "qa": 1}
    rows = {(r["framework"], r["mode"]): r for r in data["groups"]["qa"]}
    assert set(rows) == {("ar", "-"), ("hf", "plain"), ("hf", "none"), ("hf", "lossless"), ("engine", "none"),
                         ("engine", "lossless"), ("hf", "lossless-fixed"), ("engine", "lossless-fixed")}
    for key in [("hf", "plain"), ("hf", "none"), ("hf", "lossless"), ("engine", "lossless"), ("hf", "lossless-fixed"),
                ("engine", "lossless-fixed")]:
        assert rows[key]["identical_outputs"] == 1.0, key  # lossless with a point-mass drafter: the target's tokens
    assert rows[("ar", "-")]["tau"] == 1.0 and all(r["tau"] >= 1.0 for r in data["rows"])
    assert all(r["draft_passes_per_token"] in (0.0, None) for r in data["rows"])  # lookup runs no model


def test_bench_refuses_an_unknown_spec_bench_category_before_loading(tmp_path):
    from viasd_adapt.cli.main import cli

    result = CliRunner().invoke(cli, ["bench", "--target", str(tmp_path), "--draft", "prompt-lookup",
                                      "--prompts", "spec-bench:poetry"])
    assert result.exit_code == 2 and "unknown Spec-Bench category 'poetry'" in result.output


def test_draft_replaces_the_drafter_of_a_pair_and_target_with_pair_is_refused(chat_pair, tmp_path):
    from viasd_adapt.cli.main import cli

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", "--pair", str(chat_pair), "--draft", "prompt-lookup", "--frameworks", "hf",
                                      "--modes", "none", "--num-prompts", "1", "--max-new-tokens", "4", "--repeats", "1",
                                      "--task-prompts", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["run"]["draft"] == "prompt-lookup"
    assert all(r["draft_passes_per_token"] in (0.0, None) for r in data["rows"])
    refused = CliRunner().invoke(cli, ["tune", "--pair", str(chat_pair), "--target", str(chat_pair / "target")])
    assert refused.exit_code == 2 and "either --pair or --target" in refused.output
