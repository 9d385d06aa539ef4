"""Spec-Bench, the benchmark speculative-decoding papers report on: its 480 questions, grouped by
task, with a fixed calibration split.

The questions ship inside the package (``viasd_adapt/assets/spec_bench``, with the upstream notice
and licence). Spec-Bench reports per *task*; its 13 raw categories map onto 6 tasks:

=================  =====================================================================
task               categories
=================  =====================================================================
``mt_bench``       writing, roleplay, reasoning, math, coding, extraction, stem, humanities
``translation``    translation (WMT14 de-en)
``summarization``  summarization (CNN/DailyMail)
``qa``             qa (Natural Questions)
``math_reasoning`` math_reasoning (GSM8K)
``rag``            rag (Natural Questions with retrieved passages)
=================  =====================================================================

**Splits.** ``viasd tune`` calibrates on the questions whose ``question_id`` is divisible by 5
(96 questions: 16 per task, 2 per MT-bench category); ``viasd bench`` draws only from the other
384. A tuner that saw the bench's prompts would recommend settings fitted to them. The rule is a
plain arithmetic one so that anyone can reproduce it from the upstream file.

**Selection.** ``spec-bench`` means every task; ``spec-bench:qa,rag`` (or a raw category such as
``spec-bench:coding``) narrows it. ``per_category=N`` keeps N questions per task, taken
round-robin over the task's categories in question-id order, so that two MT-bench questions are a
writing and a roleplay question rather than two writing ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from viasd_adapt.errors import ConfigError

PREFIX = "spec-bench"
CALIBRATION_MODULUS = 5  # question_id % 5 == 0 -> calibration split

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS: dict[str, tuple[str, ...]] = {
    "mt_bench": MT_BENCH_CATEGORIES,
    "translation": ("translation",),
    "summarization": ("summarization",),
    "qa": ("qa",),
    "math_reasoning": ("math_reasoning",),
    "rag": ("rag",),
}
TASK_OF_CATEGORY = {category: task for task, categories in TASKS.items() for category in categories}
SPLITS = ("bench", "calibration", "all")


@dataclass(frozen=True)
class Question:
    """One Spec-Bench question: its user turns (two for MT-bench, one elsewhere)."""

    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def task(self) -> str:
        return TASK_OF_CATEGORY[self.category]

    @property
    def split(self) -> str:
        return "calibration" if self.question_id % CALIBRATION_MODULUS == 0 else "bench"


def data_dir() -> Path:
    """Where the shipped questions, notice and licence are."""
    return Path(str(resources.files("viasd_adapt"))) / "assets" / "spec_bench"


def load_questions(path: str | Path | None = None) -> list[Question]:
    """Every question of ``question.jsonl`` (the shipped one by default), in file order."""
    path = Path(path) if path is not None else data_dir() / "question.jsonl"
    questions = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                question = Question(int(item["question_id"]), str(item["category"]), tuple(str(t) for t in item["turns"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ConfigError(f"{path} line {number} is not a Spec-Bench question ({err})") from None
            if question.category not in TASK_OF_CATEGORY or not question.turns:
                raise ConfigError(f"{path} line {number}: unknown category {question.category!r} or no turns")
            questions.append(question)
    return questions


def is_spec_bench(spec: str | Path | None) -> bool:
    """Whether a ``--prompts`` value names Spec-Bench rather than a prompts file."""
    return isinstance(spec, str) and (spec == PREFIX or spec.startswith(PREFIX + ":"))


def parse_categories(spec: str) -> tuple[str, ...]:
    """The raw categories a ``spec-bench[:names]`` value asks for (task names expand to theirs)."""
    if not is_spec_bench(spec):
        raise ConfigError(f"{spec!r} does not name Spec-Bench (use 'spec-bench' or 'spec-bench:TASK,...')")
    _, _, names = spec.partition(":")
    if not names.strip():
        return tuple(TASK_OF_CATEGORY)
    chosen: list[str] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name in TASKS:
            chosen += [c for c in TASKS[name] if c not in chosen]
        elif name in TASK_OF_CATEGORY:
            chosen += [name] if name not in chosen else []
        else:
            raise ConfigError(f"unknown Spec-Bench category {name!r}; tasks: {', '.join(TASKS)}; "
                              f"categories: {', '.join(TASK_OF_CATEGORY)}")
    return tuple(chosen)


def select(spec: str = PREFIX, per_category: int | None = None, split: str = "bench",
           questions: list[Question] | None = None) -> list[Question]:
    """The questions a ``spec-bench[:names]`` value selects from ``split``, ``per_category`` per task
    (module docstring), ordered by task then round-robin position."""
    if split not in SPLITS:
        raise ConfigError(f"unknown Spec-Bench split {split!r}; one of {', '.join(SPLITS)}")
    if per_category is not None and per_category < 1:
        raise ConfigError(f"--per-category must be at least 1, got {per_category}")
    categories = parse_categories(spec)
    pool = [q for q in (questions if questions is not None else load_questions())
            if q.category in categories and (split == "all" or q.split == split)]
    chosen: list[Question] = []
    for task, task_categories in TASKS.items():
        columns = [sorted((q for q in pool if q.category == c), key=lambda q: q.question_id) for c in task_categories]
        interleaved = [column[row] for row in range(max(map(len, columns), default=0))
                       for column in columns if row < len(column)]
        chosen += interleaved[:per_category] if per_category is not None else interleaved
    return chosen


__all__ = ["CALIBRATION_MODULUS", "MT_BENCH_CATEGORIES", "PREFIX", "Question", "SPLITS", "TASKS", "TASK_OF_CATEGORY",
           "data_dir", "is_spec_bench", "load_questions", "parse_categories", "select"]
