"""Stage 1 of a mask search: prompt ids -> the windows every mask is scored on.

The target writes its greedy continuation of each calibration prompt (the slow part; a
:class:`~viasd_adapt.search.decoder_windows.WindowCache` keeps it between runs), then p's and q's
log-probabilities over the scored positions are computed once. The held-out windows of the
agreement report are built here too, so the search stage runs no generation at all.
Encoder-decoder targets take their windows from :mod:`viasd_adapt.search.seq2seq_windows`; this is
the one place the stage branches on the architecture. Which prompts, and their ids, are
:mod:`viasd_adapt.search.prompt_ids`' business.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn

from viasd_adapt.checks import check_drafter_pair
from viasd_adapt.memory import release_free_memory
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.search import decoder_windows as cal
from viasd_adapt.search.config import DEFAULTS, SearchConfig
from viasd_adapt.search.prompt_ids import PromptIds

#: Windows are right-padded with this id (exact for causal decoders: see decoder_windows).
PAD_ID = 0


@dataclass
class Prepared:
    """The calibration windows, the held-out windows, and what building them cost.

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


def prepare(target: nn.Module, draft: nn.Module, ids: PromptIds, config: SearchConfig = DEFAULTS,
            window_cache: cal.WindowCache | None = None) -> Prepared:
    """The calibration set of ``ids`` (and its held-out windows) on ``target`` and ``draft``, with
    ``config.calibration.new_tokens`` scored tokens per window (and, encoder-decoder, its
    ``continuation``).

    ``window_cache`` reuses the target's greedy windows of a decoder-only target between runs.
    A drafter over another vocabulary is refused before any forward (:class:`ModelMismatchError`).
    """
    check_drafter_pair(target, draft)
    started = time.perf_counter()
    calibration = config.calibration
    new_tokens = calibration.new_tokens
    if find_decoder_stack(target).encoder_decoder:  # ids are SOURCES; decoder windows come from the target
        from viasd_adapt.search.seq2seq_windows import build_seq2seq_calibration, build_seq2seq_windows

        fixed = build_seq2seq_calibration(target, draft, ids.calib_ids, new_tokens, references=ids.references,
                                          continuation=calibration.continuation, pad_id=PAD_ID)
        build_heldout = build_seq2seq_windows
    else:
        windows = (window_cache.windows(target, ids.calib_ids, new_tokens, PAD_ID)
                   if window_cache is not None else None)
        fixed = cal.build_calibration(target, draft, ids.calib_ids, new_tokens, PAD_ID, windows=windows)
        build_heldout = window_cache.windows if window_cache is not None else cal.build_windows
    seconds = time.perf_counter() - started
    windows_seconds = window_cache.generate_seconds if window_cache is not None else None
    heldout = build_heldout(target, ids.heldout_ids, new_tokens, pad_id=PAD_ID) if ids.heldout_ids else None
    heldout_seconds = time.perf_counter() - started - seconds
    release_free_memory()  # the greedy generations' and forwards' working sets, before every mask's forward
    return Prepared(fixed, heldout, seconds, heldout_seconds, windows_seconds,
                    window_cache.report() if window_cache is not None else None)


__all__ = ["PAD_ID", "Prepared", "prepare"]
