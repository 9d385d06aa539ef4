"""DIMR's calibration window for encoder-decoder targets: sources and teacher-forced decoder text.

The decoder-only window (:mod:`viasd_adapt.search.decoder_windows`) is a prompt plus the target's own
greedy continuation. For an encoder-decoder model the prompt is split in two: the **source** goes
to the encoder, and the decoder window is ``[decoder start] + continuation``. The continuation is,
by default, the target's own greedy output (what q verifies when decoding greedily, the reading of
the paper's section 3); with ``continuation="reference"`` the calibration pairs' target texts are
teacher-forced instead (cheaper, and useful when the target is weak). A greedy continuation stops
at EOS, inclusive: the decoder never verifies a position after EOS, unlike a decoder-only window
cut from running text.

Only decoder positions that predict continuation tokens are scored. Exactness of batching:

* sources of different lengths are right-padded and masked (the encoder and every cross-attention
  read the mask), so padding changes nothing;
* decoder windows are right-padded without a mask: the decoder is causal, so no scored position
  sees a pad after it, and positions count from 0 in every row.

The target's encoder output is the same for q and every slim view u (they share the encoder), so
it is computed once per batch and reused for every mask (:meth:`Seq2SeqWindows.log_probs`): each
candidate mask then costs one decoder forward, as in the decoder-only search. The drafter has its
own encoder, run once when its log-probs are computed.

The result plugs into :class:`viasd_adapt.search.windows.CalibrationSet` (``windows``,
``logp_draft``, ``logp_full``), so :mod:`viasd_adapt.search.objective` scores masks unchanged once
``scored_log_probs`` dispatches to :meth:`Seq2SeqWindows.log_probs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import nn

from viasd_adapt.checks import check_drafter_reads_source, check_same_vocabulary, vocab_size_of
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.model_kind import OWN_ENCODER, is_encoder_decoder, source_reader
from viasd_adapt.routing.encdec import EncoderContext
from viasd_adapt.routing.seq2seq import Seq2SeqRunner
from viasd_adapt.checks import decoder_position_limit
from viasd_adapt.routing.seq2seq import default_decoder_prompt

GREEDY = "target-model"
REFERENCE = "reference"


# ---------------------------------------------------------------------------- pairs


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str | None]], max_source_tokens: int = 256
                 ) -> tuple[list[list[int]], list[list[int]] | None]:
    """Source ids (the first ``max_source_tokens``) and, when every pair has one, target ids."""
    sources, targets = [], []
    for source, target in pairs:
        ids = list(tokenizer(source)["input_ids"])[:max_source_tokens]
        if not ids:
            raise ConfigError(f"source {source[:40]!r} encodes to no tokens")
        sources.append(ids)
        if target is not None:
            targets.append(list(tokenizer(text_target=target)["input_ids"]))
    return sources, (targets if len(targets) == len(sources) else None)


# ---------------------------------------------------------------------------- windows


@dataclass
class Seq2SeqWindows:
    """Sources plus teacher-forced decoder windows, and which decoder positions are scored.

    Attributes:
        sources: ``(W, S)`` right-padded source ids, or ``(W, mel, frames)`` input features.
        source_mask: ``(W, S)`` 1 at real source ids (None for features).
        decoder_ids: ``(W, T)`` right-padded ``decoder prompt + continuation``.
        scored: ``(W, T)`` True at positions whose next token is a continuation token.
    """

    sources: torch.Tensor
    source_mask: torch.Tensor | None
    decoder_ids: torch.Tensor
    scored: torch.Tensor
    _encoded: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_scored(self) -> int:
        """tau: the number of scored positions."""
        return int(self.scored.sum())

    @property
    def input_ids(self) -> torch.Tensor:
        """The decoder windows, under the name :class:`~viasd_adapt.search.decoder_windows.TokenWindows`
        uses, so reports that count or measure windows read both kinds alike."""
        return self.decoder_ids

    def _encoder_outputs(self, model: nn.Module, start: int, batch_size: int):
        """The encoder output of rows ``start..start+batch_size`` for ``model``'s encoder, computed
        once per encoder module (q and its slim views share one)."""
        encoder = model.get_encoder()
        key = (id(encoder), start, batch_size)
        entry = self._encoded.get(key)
        if entry is None or entry[0] is not encoder:
            name = getattr(model, "main_input_name", "input_ids")
            kwargs = {name: self.sources[start : start + batch_size]}
            if self.source_mask is not None:
                kwargs["attention_mask"] = self.source_mask[start : start + batch_size]
            entry = (encoder, encoder(**kwargs))
            self._encoded[key] = entry
        return entry[1]

    @torch.no_grad()
    def log_probs(self, model: nn.Module, batch_size: int = 16) -> torch.Tensor:
        """Teacher-forced log-probabilities of ``model`` at the scored positions, ``(tau, V)``, float32."""
        if source_reader(model) != OWN_ENCODER:
            raise ConfigError(f"{type(model).__name__} has no encoder of its own; seq2seq calibration scores "
                              "encoder-decoder models")
        chunks = []
        for start in range(0, self.decoder_ids.size(0), batch_size):
            kwargs = {"encoder_outputs": self._encoder_outputs(model, start, batch_size),
                      "decoder_input_ids": self.decoder_ids[start : start + batch_size], "use_cache": False}
            if self.source_mask is not None:
                kwargs["attention_mask"] = self.source_mask[start : start + batch_size]
            logits = model(**kwargs).logits
            chunks.append(torch.log_softmax(logits[self.scored[start : start + batch_size]].float(), dim=-1))
        return torch.cat(chunks)


@torch.no_grad()
def greedy_decode(model: nn.Module, context: EncoderContext, prompt: list[int], new_tokens: int,
                  eos: Sequence[int] = ()) -> list[int]:
    """Up to ``new_tokens`` greedy decoder tokens after ``prompt``, stopping after the first EOS."""
    runner = Seq2SeqRunner(model, context)
    sequence = list(prompt)
    stop = set(int(e) for e in eos)
    for _ in range(new_tokens):
        token = int(runner.logits_for(sequence, 1)[-1].argmax())
        sequence.append(token)
        if token in stop:
            break
    return sequence[len(prompt):]


def _stack_sources(target: nn.Module, sources: Sequence, pad_id: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    if getattr(target, "main_input_name", "input_ids") != "input_ids":
        features = [torch.as_tensor(s, dtype=torch.float32) for s in sources]
        features = [f.unsqueeze(0) if f.dim() == 2 else f for f in features]
        shapes = {tuple(f.shape[1:]) for f in features}
        if len(shapes) != 1:
            raise ConfigError(f"input features of one calibration batch must share a shape, got {sorted(shapes)}")
        return torch.cat(features), None
    vocab = vocab_size_of(target)
    rows = [list(s) for s in sources]
    for ids in rows:
        if not ids:
            raise ConfigError("a calibration source has no tokens")
        if vocab is not None and (max(ids) >= vocab or min(ids) < 0):
            raise ModelMismatchError(f"source token id {max(ids)} is outside the target's vocabulary of {vocab} tokens "
                                     "(tokenizer and model do not belong together?)")
    return pad_rows(rows, pad_id)


def pad_rows(rows: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads token rows with ``value`` into one tensor; returns it and its attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def build_seq2seq_windows(
    target: nn.Module,
    sources: Sequence,
    new_tokens: int = 48,
    references: Sequence[Sequence[int]] | None = None,
    continuation: str = GREEDY,
    decoder_prompt: Sequence[int] | None = None,
    eos_token_ids: Sequence[int] | None = None,
    pad_id: int = 0,
) -> Seq2SeqWindows:
    """Windows of ``decoder prompt + continuation`` per source (module docstring).

    Args:
        sources: token-id lists (text models) or ``(mel, frames)`` feature arrays (Whisper).
        new_tokens: the most continuation tokens per window (greedy) or kept per reference.
        references: target-text ids per source, required for ``continuation="reference"``.
        continuation: ``"target-model"`` (the target's greedy output) or ``"reference"``.
        eos_token_ids: where a greedy continuation stops (default: the generation config's).
    """
    if not is_encoder_decoder(target):
        raise ConfigError(f"{type(target).__name__} is not an encoder-decoder model; use search.calibration.build_windows")
    if not sources:
        raise ConfigError("no calibration sources")
    if new_tokens < 1:
        raise ConfigError(f"calibration needs at least 1 new token per source, got {new_tokens}")
    if continuation not in (GREEDY, REFERENCE):
        raise ConfigError(f"continuation must be {GREEDY!r} or {REFERENCE!r}, got {continuation!r}")
    if continuation == REFERENCE and (references is None or len(references) != len(sources)):
        raise ConfigError("continuation='reference' needs one reference (target text) per source")
    prompt = list(decoder_prompt) if decoder_prompt is not None else default_decoder_prompt(target)
    limit = decoder_position_limit(target)
    if limit is not None and len(prompt) + new_tokens > limit:
        raise ConfigError(f"{new_tokens} new tokens do not fit the decoder's {limit} positions")
    if eos_token_ids is None:
        eos = getattr(target.generation_config, "eos_token_id", None)
        eos_token_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    source_batch, source_mask = _stack_sources(target, sources, pad_id)
    continuations = []
    for i in range(len(sources)):
        if continuation == REFERENCE:
            tokens = list(references[i])[:new_tokens]
            if not tokens:
                raise ConfigError(f"calibration reference {i} has no tokens")
        else:
            mask = source_mask[i : i + 1] if source_mask is not None else None
            row = source_batch[i : i + 1]
            if mask is not None:
                length = int(mask.sum())
                row, mask = row[:, :length], None  # unpadded: the decode sees exactly this source
            context = EncoderContext.encode(target, row, mask)
            tokens = greedy_decode(target, context, prompt, new_tokens, eos_token_ids)
        continuations.append(tokens)
    width = max(len(prompt) + len(c) for c in continuations)
    decoder_ids = torch.full((len(sources), width), pad_id, dtype=torch.long)
    scored = torch.zeros((len(sources), width), dtype=torch.bool)
    for i, tokens in enumerate(continuations):
        window = prompt + list(tokens)
        decoder_ids[i, : len(window)] = torch.tensor(window)
        scored[i, len(prompt) - 1 : len(window) - 1] = True  # position t predicts token t + 1
    return Seq2SeqWindows(source_batch, source_mask, decoder_ids, scored)


def build_seq2seq_calibration(
    target: nn.Module,
    draft: nn.Module,
    sources: Sequence,
    new_tokens: int = 48,
    references: Sequence[Sequence[int]] | None = None,
    continuation: str = GREEDY,
    pad_id: int = 0,
    batch_size: int = 16,
):
    """Windows from the target, then p's and q's scored log-probs, once: a
    :class:`viasd_adapt.search.windows.CalibrationSet` whose ``windows`` are seq2seq windows."""
    from viasd_adapt.search.windows import CalibrationSet

    check_same_vocabulary(target, draft)
    check_drafter_reads_source(target, draft)
    if source_reader(draft) != OWN_ENCODER:
        raise ConfigError(f"DIMR calibration needs an encoder-decoder drafter; {type(draft).__name__} has no encoder")
    windows = build_seq2seq_windows(target, sources, new_tokens, references, continuation, pad_id=pad_id)
    logp_full = windows.log_probs(target, batch_size)
    logp_draft = windows.log_probs(draft, batch_size)
    if logp_full.shape != logp_draft.shape:
        raise ModelMismatchError(f"drafter and target logits differ in shape: {tuple(logp_draft.shape)} vs {tuple(logp_full.shape)}")
    if not torch.isfinite(logp_full).any(dim=-1).all():
        raise ViasdError("the target produced non-finite log-probabilities on the calibration window")
    return CalibrationSet(windows, logp_draft, logp_full)


__all__ = [
    "GREEDY",
    "REFERENCE",
    "Seq2SeqWindows",
    "build_seq2seq_calibration",
    "build_seq2seq_windows",
    "encode_pairs",
    "greedy_decode",
]
