"""The named prompt splits: which texts each command measures on, one function per split.

The splits are kept apart on purpose. ``viasd tune`` must never calibrate on what ``viasd bench``
measures (a tuner that saw the bench's prompts would recommend settings fitted to them), and a mask
search reports its agreement on prompts it did not calibrate on. Every split is reproducible: the
same arguments give the same texts on any machine with the same Python.

Held-out stdlib snippets (:mod:`viasd_adapt.prompts.stdlib`), the prompts of the code demo pairs,
are separated by their draw's seed:

=====================  ====  ==================================================================
split                  seed  texts
=====================  ====  ==================================================================
:func:`bench_snippets`    0  ``viasd bench`` without ``--prompts``
(next-line task)          1  the bench's code task (``viasd_adapt.prompts.stdlib.heldout_next_lines``)
:func:`tune_snippets`     2  ``viasd tune --calib stdlib``, minus any of the bench's default snippets
:func:`search_snippets`   s  ``viasd search``: one draw with the search's seed, cut in two
:func:`demo_snippet`      7  the completion ``viasd demo`` shows
=====================  ====  ==================================================================

Spec-Bench (:mod:`viasd_adapt.prompts.spec_bench`) is split by question id: ``viasd bench`` reads
the bench split (:func:`bench_questions`), ``viasd tune`` (:func:`tune_questions`) and ``viasd
search`` (:func:`search_question_texts`) the calibration split.

A prompts or pairs file given to ``viasd search`` is split by position: its last ``n_heldout``
entries are held out (:func:`search_prompt_file`, :func:`search_pairs_file`), so the held-out
agreement is measured on prompts of the same kind as the calibration.

Torch-free; what needs a model (tokenizing, the target's own first answers for MT-bench's second
turns) stays with the model and takes its texts from here.
"""

from __future__ import annotations

import os

from viasd_adapt.errors import ConfigError
from viasd_adapt.prompts import spec_bench
from viasd_adapt.prompts.files import read_pairs_file, read_prompts_file
from viasd_adapt.prompts.stdlib import heldout_prompts

BENCH_SNIPPET_SEED = 0
TUNE_SNIPPET_SEED = 2
DEMO_SNIPPET_SEED = 7
#: ``viasd bench``'s default number of snippets: the tune's draw leaves every one of them out.
BENCH_DEFAULT_SNIPPETS = 8
#: Snippet lengths of the bench and tune splits (characters).
SNIPPET_CHARS = (200, 400)


# ---------------------------------------------------------------------------- stdlib snippets


def bench_snippets(n: int) -> list[str]:
    """``n`` held-out stdlib snippets for ``viasd bench`` (never seen in training by the project's
    own pairs)."""
    return heldout_prompts(n, seed=BENCH_SNIPPET_SEED, min_chars=SNIPPET_CHARS[0], max_chars=SNIPPET_CHARS[1])


def tune_snippets(n: int) -> list[str]:
    """``n`` held-out stdlib snippets for ``viasd tune``: a draw of their own (another seed), with
    any of the bench's default snippets dropped, so that the tuner never calibrates on them."""
    excluded = set(bench_snippets(BENCH_DEFAULT_SNIPPETS))
    drawn = heldout_prompts(n + len(excluded), seed=TUNE_SNIPPET_SEED)
    return [text for text in drawn if text not in excluded][:n]


def search_snippets(n_calibration: int, n_heldout: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``(calibration, held-out)`` stdlib snippets for a mask search: one draw of
    ``n_calibration + n_heldout`` snippets cut in two, so the held-out ones are never calibrated on."""
    drawn = heldout_prompts(n_calibration + n_heldout, seed=seed)
    return drawn[:n_calibration], drawn[n_calibration:]


def demo_snippet() -> str:
    """The short held-out snippet ``viasd demo`` completes with the project's code pairs."""
    return heldout_prompts(1, seed=DEMO_SNIPPET_SEED, min_chars=120, max_chars=240)[0]


# ---------------------------------------------------------------------------- Spec-Bench


def bench_questions(selector: str = spec_bench.PREFIX, per_category: int | None = None) -> list[spec_bench.Question]:
    """The questions ``viasd bench --prompts spec-bench[:names]`` measures: the bench split,
    ``per_category`` per task (:func:`~viasd_adapt.prompts.spec_bench.select`)."""
    return spec_bench.select(selector, per_category, "bench")


def tune_questions(n: int) -> list[spec_bench.Question]:
    """Enough calibration-split questions for ``n`` prompts of ``viasd tune``: ``ceil(n / 6)`` per
    task, so that a round-robin over the tasks' prompts covers every task."""
    if n < 1:
        raise ConfigError(f"the tune needs at least one calibration prompt, got {n}")
    per_task = -(-n // len(spec_bench.TASKS))
    return spec_bench.select(spec_bench.PREFIX, per_task, "calibration")


def search_question_texts(selector: str, n_calibration: int, n_heldout: int) -> tuple[list[str], list[str]]:
    """``(calibration, held-out)`` first turns of Spec-Bench *calibration-split* questions for a
    mask search (``viasd bench`` never reads them), taken round-robin over the tasks so both sets
    cover every task: ``n_calibration`` to calibrate on, the next ``n_heldout`` for the agreement."""
    questions = spec_bench.select(selector, split="calibration")
    tasks = list(dict.fromkeys(q.task for q in questions))
    columns = [[q for q in questions if q.task == t] for t in tasks]
    order = [column[row] for row in range(max(map(len, columns), default=0)) for column in columns if row < len(column)]
    if len(order) < n_calibration + n_heldout:
        raise ConfigError(f"{selector} has {len(order)} calibration questions; {n_calibration} + {n_heldout} requested")
    texts = [q.turns[0] for q in order[: n_calibration + n_heldout]]
    return texts[:n_calibration], texts[n_calibration:]


# ---------------------------------------------------------------------------- files


def _held_out_tail(items: list, n_heldout: int, what: str, noun: str) -> tuple[list, list]:
    """``items`` cut before its last ``n_heldout`` entries; at least one is left to calibrate on."""
    if len(items) <= n_heldout:
        raise ConfigError(f"{what} has {len(items)} {noun}; more than --heldout-prompts ({n_heldout}) are needed "
                          f"(its last --heldout-prompts {noun} are held out for the agreement report)")
    split = len(items) - n_heldout
    return items[:split], items[split:]


def search_prompt_file(path: str | os.PathLike, n_heldout: int) -> tuple[list[str], list[str]]:
    """``(calibration, held-out)`` prompts of a ``viasd search --calib FILE``: the file's last
    ``n_heldout`` prompts are held out (:func:`~viasd_adapt.prompts.files.read_prompts_file`'s format)."""
    prompts = read_prompts_file(path, "calibration file")
    return _held_out_tail(prompts, n_heldout, f"--calib {path}", "prompts")


def search_pairs_file(path: str | os.PathLike, n_heldout: int) -> tuple[list[tuple[str, str | None]],
                                                                        list[tuple[str, str | None]]]:
    """``(calibration, held-out)`` source -> target pairs of a ``viasd search --calib-pairs FILE``:
    the file's last ``n_heldout`` pairs are held out (:func:`~viasd_adapt.prompts.files.read_pairs_file`)."""
    return _held_out_tail(read_pairs_file(path), n_heldout, f"--calib-pairs {path}", "pairs")


__all__ = ["BENCH_DEFAULT_SNIPPETS", "BENCH_SNIPPET_SEED", "DEMO_SNIPPET_SEED", "TUNE_SNIPPET_SEED", "bench_questions",
           "bench_snippets", "demo_snippet", "search_pairs_file", "search_prompt_file", "search_question_texts",
           "search_snippets", "tune_questions", "tune_snippets"]
