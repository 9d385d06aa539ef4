"""What a bench (or tune) run feeds the models: prompt ids, each with the Spec-Bench task it belongs to.

The texts come from the prompts room (:mod:`viasd_adapt.prompts.splits` names which split each
command reads); this module does what needs the model. Text prompts (held-out stdlib snippets, a
prompts file) go through the chat template per ``--chat`` (:mod:`viasd_adapt.prompts.chat`).
Spec-Bench questions (:mod:`viasd_adapt.prompts.spec_bench`) become one prompt per user turn. MT-bench's second turn follows the model's own first answer, as Spec-Bench runs it;
here that answer is the *target's* greedy one (its AR output, up to EOS or the token cap), so every
row sees the same second-turn prompt and rows stay comparable position by position. For a lossless
row that is the answer it wrote itself; a lossy row's own first answer may differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.prompts.chat import encode_messages, encode_prompt, user_turns
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.prompts.spec_bench import Question
from viasd_adapt.prompts.splits import bench_questions, tune_questions

UNGROUPED = ""


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt's ids, its group (a Spec-Bench task; ``""`` for plain prompts) and a label."""

    ids: list[int]
    group: str = UNGROUPED
    label: str = ""


def text_prompts(tokenizer, texts: Sequence[str], chat: str = "auto") -> list[BenchPrompt]:
    """Plain prompts, through the chat template per ``chat``."""
    prompts = [BenchPrompt(encode_prompt(tokenizer, text, chat), UNGROUPED, f"prompt {n}") for n, text in enumerate(texts)]
    empty = [p.label for p in prompts if not p.ids]
    if empty:
        raise ConfigError(f"every prompt must tokenize to at least one token ({empty[0]} does not)")
    return prompts


def first_answer(pair: LoadedPair, prompt_ids: list[int], max_new_tokens: int) -> str:
    """The target's greedy answer to a first turn, up to EOS (decoded without special tokens)."""
    request = RunRequest.tiered(prompt_ids, max_new_tokens, TierSettings(mode="none"), stop_at_eos=True)
    tokens = frameworks.run("ar", pair, request).tokens
    return pair.tokenizer.decode(tokens, skip_special_tokens=True).strip()


def question_prompts(pair: LoadedPair, questions: Sequence[Question], chat: str, max_new_tokens: int) -> list[BenchPrompt]:
    """One prompt per user turn of each question (module docstring for the second turn)."""
    prompts: list[BenchPrompt] = []
    for question in questions:
        answers: list[str] = []
        for turn in range(len(question.turns)):
            ids = encode_messages(pair.tokenizer, user_turns(question.turns[: turn + 1], answers), chat)
            prompts.append(BenchPrompt(ids, question.task, f"q{question.question_id}/turn{turn + 1}"))
            if turn + 1 < len(question.turns):
                answers.append(first_answer(pair, ids, max_new_tokens))
    return prompts


def spec_bench_prompts(pair: LoadedPair, spec: str, per_category: int | None, chat: str,
                       max_new_tokens: int) -> list[BenchPrompt]:
    """The prompts of ``viasd bench --prompts spec-bench[:names]``: the bench split
    (:func:`~viasd_adapt.prompts.splits.bench_questions`; the bench never reads the calibration split)."""
    return question_prompts(pair, bench_questions(spec, per_category), chat, max_new_tokens)


def round_robin(prompts: Sequence[BenchPrompt], n: int) -> list[BenchPrompt]:
    """``n`` prompts taken in turn from each group, so that a small set still covers every task."""
    groups: dict[str, list[BenchPrompt]] = {}
    for prompt in prompts:
        groups.setdefault(prompt.group, []).append(prompt)
    taken: list[BenchPrompt] = []
    for row in range(max((len(g) for g in groups.values()), default=0)):
        taken += [group[row] for group in groups.values() if row < len(group)]
    return taken[:n]


def tune_spec_bench_prompts(pair: LoadedPair, n: int, chat: str, max_new_tokens: int) -> list[BenchPrompt]:
    """``n`` prompts of Spec-Bench's calibration split (``question_id % 5 == 0``, which the bench
    never reads; :func:`~viasd_adapt.prompts.splits.tune_questions`), spread over the tasks: what
    ``viasd tune`` calibrates a chat model on."""
    return round_robin(question_prompts(pair, tune_questions(n), chat, max_new_tokens), n)


__all__ = ["BenchPrompt", "UNGROUPED", "first_answer", "question_prompts", "round_robin", "spec_bench_prompts",
           "text_prompts", "tune_spec_bench_prompts"]
