"""Which prompts a mask search calibrates on, and their token ids.

A search calibrates on one set of prompts and reports agreement on a held-out set it never saw.
Chat targets use Spec-Bench's *calibration split* questions (``viasd bench`` never reads them)
through the chat template; other decoder-only targets use held-out stdlib snippets (the demo pairs
are code models); encoder-decoder targets need source -> target pairs from a file.

Importable without torch: the CLI reads :class:`CalibrationSpec`'s defaults at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.defaults import DEFAULT_CALIB_PROMPTS, DEFAULT_HELDOUT_PROMPTS, DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS

#: ``continuation`` values: the target's greedy output, or the pairs' reference targets (seq2seq).
CONTINUATIONS = ("target-model", "reference")


@dataclass(frozen=True)
class CalibrationSpec:
    """Where calibration and held-out prompts come from and how long the windows are.

    ``pairs_file``: source -> target pairs, the prompts of an encoder-decoder target (the last
    ``n_heldout`` pairs are held out). ``continuation``: what follows an encoder-decoder window's
    prompt (:data:`CONTINUATIONS`). ``spec_bench_for_chat``: a chat target without ``calib_file``
    calibrates on Spec-Bench questions (``viasd search``); off, on the stdlib snippets (the quick
    searches of ``viasd tune``).
    """

    calib_file: Path | None = None
    n_calibration: int = DEFAULT_CALIB_PROMPTS
    n_heldout: int = DEFAULT_HELDOUT_PROMPTS
    new_tokens: int = DEFAULT_NEW_TOKENS
    max_prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    prompt_seed: int = 0
    pairs_file: Path | None = None
    continuation: str = "target-model"
    spec_bench_for_chat: bool = True

    def __post_init__(self) -> None:
        for name in ("n_calibration", "n_heldout", "new_tokens", "max_prompt_tokens", "prompt_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"calibration {name} must be an integer, got {value!r}")
        for name in ("n_calibration", "new_tokens", "max_prompt_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"calibration {name} must be >= 1, got {getattr(self, name)}")
        if self.n_heldout < 0:
            raise ConfigError(f"calibration n_heldout must be >= 0, got {self.n_heldout}")
        if self.continuation not in CONTINUATIONS:
            raise ConfigError(f"calibration continuation must be one of {CONTINUATIONS}, got {self.continuation!r}")

    def to_dict(self) -> dict:
        """What the mask artifact records about its calibration (``search.calibration``)."""
        return {
            "calib_file": str(self.calib_file) if self.calib_file else None,
            "source": "file" if self.calib_file else "stdlib held-out corpus (viasd_adapt.models.corpus)",
            "n_calibration": self.n_calibration,
            "n_heldout": self.n_heldout,
            "new_tokens": self.new_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "prompt_seed": self.prompt_seed,
        }


@dataclass(frozen=True)
class CalibrationPrompts:
    """Token ids the calibration stage runs on: ``calib_ids`` for the search, ``heldout_ids`` for
    the agreement report; ``references`` are the pairs' target ids (encoder-decoder, when given)."""

    calib_ids: list[list[int]]
    heldout_ids: list[list[int]]
    references: list[list[int]] | None = None


def uses_spec_bench(tokenizer, spec: CalibrationSpec) -> bool:
    """Spec-Bench calibration questions when ``--calib spec-bench[:tasks]`` names them, or by default
    for a target with a chat template (the stdlib snippets are prompts for the code demo pairs)."""
    from viasd_adapt.prompts.chat import has_chat_template
    from viasd_adapt.prompts.spec_bench import is_spec_bench

    if spec.calib_file is not None:
        return is_spec_bench(str(spec.calib_file))
    return spec.spec_bench_for_chat and has_chat_template(tokenizer)


def chat_prompt_ids(tokenizer, text: str, max_tokens: int) -> list[int]:
    """A user turn through the chat template, at most ``max_tokens`` ids: a long question is cut
    (its text, not the template), so the generation prompt that makes the target answer survives."""
    from viasd_adapt.prompts.chat import encode_prompt

    ids = encode_prompt(tokenizer, text)
    if len(ids) <= max_tokens:
        return ids
    text_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    overhead = len(ids) - len(text_ids)
    if overhead >= max_tokens:
        return ids[-max_tokens:]
    ids = encode_prompt(tokenizer, tokenizer.decode(text_ids[: max_tokens - overhead]))
    return ids[-max_tokens:] if len(ids) > max_tokens else ids


def spec_bench_texts(spec: CalibrationSpec) -> tuple[list[str], list[str]]:
    """First turns of Spec-Bench *calibration-split* questions (``viasd bench`` never reads them):
    ``n_calibration`` for the search and the next ``n_heldout`` for the agreement report, taken
    round-robin over the tasks so both sets cover every task."""
    from viasd_adapt.prompts import spec_bench

    selector = str(spec.calib_file) if spec.calib_file is not None else spec_bench.PREFIX
    questions = spec_bench.select(selector, split="calibration")
    tasks = list(dict.fromkeys(q.task for q in questions))
    columns = [[q for q in questions if q.task == t] for t in tasks]
    order = [column[row] for row in range(max(map(len, columns), default=0)) for column in columns if row < len(column)]
    if len(order) < spec.n_calibration + spec.n_heldout:
        raise ConfigError(f"{selector} has {len(order)} calibration questions; {spec.n_calibration} + {spec.n_heldout} requested")
    chosen = order[: spec.n_calibration + spec.n_heldout]
    texts = [q.turns[0] for q in chosen]
    return texts[: spec.n_calibration], texts[spec.n_calibration :]


def prompt_token_ids(tokenizer, spec: CalibrationSpec) -> tuple[list[list[int]], list[list[int]]]:
    """(calibration, held-out) token ids of a decoder-only target. With a calibration file,
    held-out prompts still come from the corpus, so agreement is always measured on text the
    search never saw. Chat targets (and ``--calib spec-bench``) use Spec-Bench calibration
    questions through the chat template."""
    from viasd_adapt.search import decoder_windows as cal
    if uses_spec_bench(tokenizer, spec):
        calib_text, heldout_text = spec_bench_texts(spec)
        return ([chat_prompt_ids(tokenizer, t, spec.max_prompt_tokens) for t in calib_text],
                [chat_prompt_ids(tokenizer, t, spec.max_prompt_tokens) for t in heldout_text])
    if spec.calib_file is not None:
        calib_text = cal.load_prompt_file(spec.calib_file)
        _, heldout_text = cal.default_prompts(0, spec.n_heldout, seed=spec.prompt_seed)
    else:
        calib_text, heldout_text = cal.default_prompts(spec.n_calibration, spec.n_heldout, seed=spec.prompt_seed)
    return (cal.encode_prompts(tokenizer, calib_text, spec.max_prompt_tokens),
            cal.encode_prompts(tokenizer, heldout_text, spec.max_prompt_tokens))


def pair_token_ids(tokenizer, spec: CalibrationSpec) -> CalibrationPrompts:
    """An encoder-decoder target's sources (and reference targets) from ``spec.pairs_file``; the
    last ``n_heldout`` pairs are held out for the agreement report."""
    from viasd_adapt.search.seq2seq_windows import encode_pairs, load_pair_file

    if spec.pairs_file is None:
        raise ConfigError("an encoder-decoder target needs --calib-pairs (source -> target pairs); the default "
                          "stdlib snippets are prompts for decoder-only models")
    pairs = load_pair_file(spec.pairs_file)
    if len(pairs) <= spec.n_heldout:
        raise ConfigError(f"--calib-pairs has {len(pairs)} pairs; more than --heldout-prompts ({spec.n_heldout}) are needed")
    sources, references = encode_pairs(tokenizer, pairs, max_source_tokens=spec.max_prompt_tokens)
    split = len(sources) - spec.n_heldout
    return CalibrationPrompts(sources[:split], sources[split:], references[:split] if references is not None else None)


def calibration_prompts(tokenizer, spec: CalibrationSpec, encoder_decoder: bool) -> CalibrationPrompts:
    """The prompts of one search: pairs for an encoder-decoder target, else :func:`prompt_token_ids`."""
    if encoder_decoder:
        return pair_token_ids(tokenizer, spec)
    calib_ids, heldout_ids = prompt_token_ids(tokenizer, spec)
    return CalibrationPrompts(calib_ids, heldout_ids)


def calibration_record(tokenizer, spec: CalibrationSpec, prompt_lookup: bool = False) -> dict:
    """``search.calibration`` of the artifact: the spec, what the prompts really were, and how a
    prompt-lookup drafter (no distribution of its own) was stood in for."""
    record = spec.to_dict()
    if prompt_lookup:
        record["drafter_distribution"] = "target's first layer + head (prompt-lookup has no distribution)"
    if uses_spec_bench(tokenizer, spec):
        record["source"] = "Spec-Bench calibration split (first turns), chat template"
    return record


def check_prompt_file(spec: CalibrationSpec) -> None:
    """Fails fast on an empty or unreadable calibration file (before any model is loaded)."""
    from viasd_adapt.search.decoder_windows import load_prompt_file
    from viasd_adapt.prompts.spec_bench import is_spec_bench

    if spec.calib_file is not None and not is_spec_bench(str(spec.calib_file)):
        load_prompt_file(spec.calib_file)


__all__ = ["CONTINUATIONS", "CalibrationPrompts", "CalibrationSpec", "calibration_prompts", "calibration_record",
           "chat_prompt_ids", "check_prompt_file", "pair_token_ids", "prompt_token_ids", "spec_bench_texts",
           "uses_spec_bench"]
