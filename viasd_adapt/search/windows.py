"""The fixed data a mask search scores every mask on: windows plus p's and q's log-probabilities.

It sits below both producers, :mod:`viasd_adapt.search.decoder_windows` (decoder-only windows) and
:mod:`viasd_adapt.search.seq2seq_windows` (encoder-decoder windows), so neither imports the other's
package for it: ``windows`` is anything with ``num_scored`` (``TokenWindows``, ``Seq2SeqWindows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class CalibrationSet:
    """Windows plus p's and q's log-probs over their scored positions, computed once."""

    windows: Any  # TokenWindows or Seq2SeqWindows: has num_scored (tau)
    logp_draft: torch.Tensor  # (tau, V)
    logp_full: torch.Tensor  # (tau, V)

    @property
    def tau(self) -> int:
        return self.windows.num_scored

    @property
    def full_argmax(self) -> torch.Tensor:
        return self.logp_full.argmax(-1)


__all__ = ["CalibrationSet"]
