"""Stage 1 of a mask search: prompts -> the calibration windows every mask is scored on.

The target writes its greedy continuation of each prompt (the slow part; a
:class:`~viasd_adapt.search.decoder_windows.WindowCache` keeps it between runs), then p's and q's
log-probabilities over the scored positions are computed once. The held-out windows of the
agreement report are built here too, so the search stage runs no generation at all.
Encoder-decoder targets take their windows from :mod:`viasd_adapt.search.seq2seq_windows`; this is
the one place the stage branches on the architecture.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from torch import nn

from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.search import decoder_windows as cal


@dataclass(frozen=True)
class CalibrationInput:
    """Token ids and window lengths for one calibration.

    ``calib_ids`` are prompts (decoder-only) or sources (encoder-decoder, whose decoder windows
    come from the target); ``references`` are the sources' target ids, read when ``continuation``
    is ``"reference"``.
    """

    calib_ids: Sequence[Sequence[int]]
    heldout_ids: Sequence[Sequence[int]] = ()
    new_tokens: int = cal.DEFAULT_NEW_TOKENS
    pad_id: int = 0
    references: Sequence[Sequence[int]] | None = None
    continuation: str = "target-model"


@dataclass
class Calibrated:
    """The calibration windows and what building them cost.

    Attributes:
        calibration: windows plus p's and q's scored log-probs (the search's fixed data).
        heldout: the held-out windows of the agreement report (None without held-out prompts).
        seconds: wall time of the calibration (held-out windows excluded).
        heldout_seconds: wall time of the held-out windows.
        windows_seconds: time spent generating windows on cache misses (None without a cache).
        window_cache: the cache's hits and misses after the held-out windows (None without one).
    """

    calibration: cal.CalibrationSet
    heldout: object | None
    seconds: float
    heldout_seconds: float = 0.0
    windows_seconds: float | None = None
    window_cache: dict | None = None

    @property
    def tau(self) -> int:
        return self.calibration.tau

    @property
    def num_windows(self) -> int:
        return int(self.calibration.windows.input_ids.size(0))


def calibrate(target: nn.Module, draft: nn.Module, inputs: CalibrationInput,
              window_cache: cal.WindowCache | None = None) -> Calibrated:
    """Builds the calibration set (and held-out windows) of ``inputs`` on ``target`` and ``draft``.

    ``window_cache`` reuses the target's greedy windows of a decoder-only target between runs.
    A drafter over another vocabulary is refused before any forward (:class:`ModelMismatchError`).
    """
    cal.check_compatible(target, draft)
    started = time.perf_counter()
    encoder_decoder = find_decoder_stack(target).encoder_decoder
    if encoder_decoder:  # calib_ids / heldout_ids are SOURCES; decoder windows come from the target
        from viasd_adapt.search.seq2seq_windows import build_seq2seq_calibration, build_seq2seq_windows

        calibration = build_seq2seq_calibration(target, draft, inputs.calib_ids, inputs.new_tokens,
                                                references=inputs.references, continuation=inputs.continuation,
                                                pad_id=inputs.pad_id)
        build_heldout = build_seq2seq_windows
    else:
        windows = (window_cache.windows(target, inputs.calib_ids, inputs.new_tokens, inputs.pad_id)
                   if window_cache is not None else None)
        calibration = cal.build_calibration(target, draft, inputs.calib_ids, inputs.new_tokens, inputs.pad_id,
                                            windows=windows)
        build_heldout = window_cache.windows if window_cache is not None else cal.build_windows
    seconds = time.perf_counter() - started
    windows_seconds = window_cache.generate_seconds if window_cache is not None else None
    heldout = (build_heldout(target, inputs.heldout_ids, inputs.new_tokens, pad_id=inputs.pad_id)
               if inputs.heldout_ids else None)
    heldout_seconds = time.perf_counter() - started - seconds
    return Calibrated(calibration, heldout, seconds, heldout_seconds, windows_seconds,
                      window_cache.report() if window_cache is not None else None)


__all__ = ["CalibrationInput", "Calibrated", "calibrate"]
