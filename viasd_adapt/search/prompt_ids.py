"""Which prompts a mask search runs on, as token ids: the calibration prompts and the held-out ones.

A search calibrates on one set of prompts and reports agreement on a held-out set of the same kind
that it never saw. The texts come from the prompts room (:mod:`viasd_adapt.prompts.splits`, one
function per split); this module picks the split a config asks for and tokenizes it:

* ``--calib spec-bench[:tasks]``, or by default a target with a chat template: Spec-Bench's
  calibration split (``viasd bench`` never reads it), first turns;
* ``--calib FILE``: the file's prompts, its last ``--heldout-prompts`` held out;
* otherwise held-out stdlib snippets (the demo pairs are code models);
* an encoder-decoder target: source -> target pairs from ``--calib-pairs``, the last ones held out.

Text prompts go through the chat template per ``--chat`` (:mod:`viasd_adapt.prompts.chat`).
:func:`calibration_record` is what the mask artifact records about them (files named relative to
the working folder, never by a machine path).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from viasd_adapt.errors import ConfigError
from viasd_adapt.io import relative_name
from viasd_adapt.prompts import splits
from viasd_adapt.prompts.chat import encode_prompt, has_chat_template, uses_chat
from viasd_adapt.prompts.spec_bench import PREFIX as SPEC_BENCH, is_spec_bench
from viasd_adapt.search.config import CalibrationConfig, SearchConfig

STDLIB_SOURCE = "stdlib held-out corpus (viasd_adapt.prompts.stdlib)"
SPEC_BENCH_SOURCE = "Spec-Bench calibration split (first turns)"
FILE_SOURCE = "file"
PAIRS_SOURCE = "pairs file"
PROMPT_LOOKUP_DRAFTER = "target's first layer + head (prompt-lookup has no distribution)"


@dataclass(frozen=True)
class PromptIds:
    """Token ids the calibration stage runs on: ``calib_ids`` for the search, ``heldout_ids`` for
    the agreement report; ``references`` are the pairs' target ids (encoder-decoder, when every
    pair has one). Decoder-only ids are prompts; encoder-decoder ids are sources."""

    calib_ids: list[list[int]]
    heldout_ids: list[list[int]]
    references: list[list[int]] | None = None


def uses_spec_bench(tokenizer, calibration: CalibrationConfig) -> bool:
    """Spec-Bench calibration questions when ``--calib spec-bench[:tasks]`` names them, or by default
    for a target with a chat template (the stdlib snippets are prompts for the code demo pairs)."""
    if calibration.calib_file is not None:
        return is_spec_bench(str(calibration.calib_file))
    return calibration.spec_bench_for_chat and has_chat_template(tokenizer)


def chat_prompt_ids(tokenizer, text: str, max_tokens: int, chat: str = "auto") -> list[int]:
    """A user turn through the chat template (per ``chat``), at most ``max_tokens`` ids: a long
    question is cut (its text, not the template), so the generation prompt that makes the target
    answer survives."""
    ids = encode_prompt(tokenizer, text, chat)
    if len(ids) <= max_tokens:
        return ids
    text_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    overhead = len(ids) - len(text_ids)
    if overhead >= max_tokens:
        return ids[-max_tokens:]
    ids = encode_prompt(tokenizer, tokenizer.decode(text_ids[: max_tokens - overhead]), chat)
    return ids[-max_tokens:] if len(ids) > max_tokens else ids


def prompt_texts(tokenizer, config: SearchConfig) -> tuple[list[str], list[str]]:
    """``(calibration, held-out)`` texts of a decoder-only target (module docstring)."""
    calibration = config.calibration
    if uses_spec_bench(tokenizer, calibration):
        selector = str(calibration.calib_file) if calibration.calib_file is not None else SPEC_BENCH
        return splits.search_question_texts(selector, calibration.n_calibration, calibration.n_heldout)
    if calibration.calib_file is not None:
        return splits.search_prompt_file(calibration.calib_file, calibration.n_heldout)
    return splits.search_snippets(calibration.n_calibration, calibration.n_heldout, seed=config.seed)


def encode_texts(tokenizer, texts: list[str], calibration: CalibrationConfig) -> list[list[int]]:
    """Token ids of ``texts``: through the chat template per ``calibration.chat`` (cut in the text,
    :func:`chat_prompt_ids`), else their first ``max_prompt_tokens`` tokens."""
    if uses_chat(tokenizer, calibration.chat):
        return [chat_prompt_ids(tokenizer, text, calibration.max_prompt_tokens, calibration.chat) for text in texts]
    from viasd_adapt.search.decoder_windows import encode_prompts

    return encode_prompts(tokenizer, texts, calibration.max_prompt_tokens)


def pair_ids(tokenizer, calibration: CalibrationConfig) -> PromptIds:
    """An encoder-decoder target's sources (and reference targets) from ``calibration.pairs_file``;
    the last ``n_heldout`` pairs are held out for the agreement report."""
    from viasd_adapt.search.seq2seq_windows import encode_pairs

    if calibration.pairs_file is None:
        raise ConfigError("an encoder-decoder target needs --calib-pairs (source -> target pairs); the default "
                          "stdlib snippets are prompts for decoder-only models")
    calib_pairs, heldout_pairs = splits.search_pairs_file(calibration.pairs_file, calibration.n_heldout)
    sources, references = encode_pairs(tokenizer, calib_pairs + heldout_pairs,
                                       max_source_tokens=calibration.max_prompt_tokens)
    split = len(calib_pairs)
    return PromptIds(sources[:split], sources[split:], references[:split] if references is not None else None)


def prompt_ids(tokenizer, config: SearchConfig, encoder_decoder: bool) -> PromptIds:
    """The token ids of one search: pairs for an encoder-decoder target, else the texts of
    :func:`prompt_texts` through :func:`encode_texts`."""
    if encoder_decoder:
        return pair_ids(tokenizer, config.calibration)
    calib_text, heldout_text = prompt_texts(tokenizer, config)
    return PromptIds(encode_texts(tokenizer, calib_text, config.calibration),
                     encode_texts(tokenizer, heldout_text, config.calibration))


def _portable(path: Path | str | None) -> str | None:
    """A file as an artifact names it: relative to the working folder when inside it, else its name
    (a Spec-Bench selector as given)."""
    if path is None or is_spec_bench(str(path)):
        return None if path is None else str(path)
    return relative_name(path, Path.cwd())


def calibration_record(tokenizer, config: SearchConfig, prompt_lookup: bool = False,
                       encoder_decoder: bool = False) -> dict:
    """``search.calibration`` of the artifact: where the prompts came from and the window lengths,
    and how a prompt-lookup drafter (no distribution of its own) was stood in for."""
    calibration = config.calibration
    record: dict = {"calib_file": _portable(calibration.calib_file)}
    if encoder_decoder:
        record["pairs_file"] = _portable(calibration.pairs_file)
        source = PAIRS_SOURCE + (f", its last {calibration.n_heldout} pairs held out" if calibration.n_heldout else "")
    elif uses_spec_bench(tokenizer, calibration):
        source = SPEC_BENCH_SOURCE
    elif calibration.calib_file is not None:
        source = FILE_SOURCE + (f", its last {calibration.n_heldout} prompts held out" if calibration.n_heldout else "")
    else:
        source = STDLIB_SOURCE
    if not encoder_decoder and uses_chat(tokenizer, calibration.chat):
        source += ", chat template"
    record.update(source=source, n_calibration=calibration.n_calibration, n_heldout=calibration.n_heldout,
                  new_tokens=calibration.new_tokens, max_prompt_tokens=calibration.max_prompt_tokens,
                  prompt_seed=config.seed)
    if prompt_lookup:
        record["drafter_distribution"] = PROMPT_LOOKUP_DRAFTER
    return record


def count_file_prompts(calib_file) -> int | None:
    """How many prompts a ``--calib`` file holds (None for no file, or Spec-Bench)."""
    if calib_file is None or is_spec_bench(str(calib_file)):
        return None
    from viasd_adapt.prompts.files import read_prompts_file

    return len(read_prompts_file(calib_file, "calibration file"))


def fit_heldout(config: SearchConfig) -> tuple[SearchConfig, str | None]:
    """``config`` with as many prompts held out as its ``--calib`` file allows (a quarter of a file too
    short for the asked number, at least one left to calibrate on), and the sentence that says so
    (None when nothing changed): a small prompt file works instead of being refused."""
    from dataclasses import replace

    calibration = config.calibration
    count = count_file_prompts(calibration.calib_file)
    if count is None or count > calibration.n_heldout:
        return config, None
    held = count // 4
    note = (f"{calibration.calib_file} has {count} prompts: {held} held out for the agreement report "
            f"(not {calibration.n_heldout}), {count - held} calibrated on"
            + ("; give more prompts for a held-out check" if held == 0 else ""))
    return replace(config, calibration=replace(calibration, n_heldout=held)), note


def check_prompt_sources(config: SearchConfig) -> None:
    """Fails fast, before any model is loaded, on a calibration file or pairs file that is missing,
    empty, or too short to hold out ``--heldout-prompts`` of its entries, and on a Spec-Bench
    selection with too few questions."""
    calibration = config.calibration
    if calibration.calib_file is not None:
        if is_spec_bench(str(calibration.calib_file)):
            splits.search_question_texts(str(calibration.calib_file), calibration.n_calibration, calibration.n_heldout)
        else:
            splits.search_prompt_file(calibration.calib_file, calibration.n_heldout)
    if calibration.pairs_file is not None:
        splits.search_pairs_file(calibration.pairs_file, calibration.n_heldout)


__all__ = ["PromptIds", "calibration_record", "chat_prompt_ids", "check_prompt_sources", "count_file_prompts", "encode_texts",
           "fit_heldout", "pair_ids",
           "prompt_ids", "prompt_texts", "uses_spec_bench"]
