"""The calibration window DIMR scores masks on (the paper's calibration window, section 3).

A window is a prompt followed by the target's own greedy continuation, run teacher-forced. Only the
positions that predict continuation tokens are scored: they are the positions a verifier actually
judges during decoding, while prompt positions mostly measure how well a model reads human text.

Why right padding without an attention mask is exact here: every model we route is causal, so a
real position never attends to a pad that comes after it, and position ids count from 0 for every
row. Windows of different lengths can therefore share one batch with no per-family padding logic.

The drafter's (p) and target's (q) log-probabilities over the scored positions are computed ONCE;
each candidate mask then costs one slim forward over the same batch (see ``objective.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from viasd_adapt.checks import check_drafter_pair, max_positions, vocab_size_of
from viasd_adapt.search.windows import CalibrationSet  # also importable from here, as before
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.routing.runner import CachedRunner, accepts_logits_to_keep, input_device
from viasd_adapt.search.config import DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS

BATCH_TOKENS = 16_384  # tokens per teacher-forced forward (all windows of a default calibration)
#: Logits one teacher-forced forward may produce (float32 elements; 2**26 is 256 MB). All 16 windows
#: of a default calibration in one forward are 16 x up to 112 columns: 0.35 GB of logits with
#: SmolLM2's 49,152-token vocabulary, 1.1 GB with Qwen2's 151,936 (then their log-probs again).
#: Splitting a batch does not change a value: each window is computed alone (tested).
LOGITS_ELEMENTS = 1 << 26


# ---------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class TokenWindows:
    """Right-padded prompt + continuation rows and which positions are scored.

    Attributes:
        input_ids: ``(W, T)`` token ids, right-padded.
        scored: ``(W, T)`` bool; True at positions whose next token is a continuation token.
    """

    input_ids: torch.Tensor
    scored: torch.Tensor

    @property
    def num_scored(self) -> int:
        """tau: the number of scored positions."""
        return int(self.scored.sum())


def encode_prompts(tokenizer, prompts: Sequence[str], max_prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> list[list[int]]:
    """Token ids of each prompt, keeping the first ``max_prompt_tokens`` (so a BOS survives)."""
    encoded = []
    for prompt in prompts:
        ids = list(tokenizer(prompt)["input_ids"])[:max_prompt_tokens]
        if not ids:
            raise ConfigError(f"prompt {prompt[:40]!r} encodes to no tokens")
        encoded.append(ids)
    return encoded


@torch.no_grad()
def greedy_continuation(model: nn.Module, prompt_ids: Sequence[int], new_tokens: int) -> list[int]:
    """``new_tokens`` greedy tokens of ``model`` after ``prompt_ids`` (EOS does not stop it: the
    window only needs the target's own most likely text, not a well-formed ending)."""
    runner = CachedRunner(model)
    sequence = list(prompt_ids)
    for _ in range(new_tokens):
        sequence.append(int(runner.logits_for(sequence, 1)[-1].argmax()))
    return sequence[len(prompt_ids):]


def build_windows(
    target: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    new_tokens: int = DEFAULT_NEW_TOKENS,
    pad_id: int = 0,
) -> TokenWindows:
    """Windows of prompt + the target's greedy continuation of ``new_tokens`` tokens.

    ``pad_id`` only fills the tail of shorter rows, which no scored position can see (causal
    attention), so any in-vocabulary id will do.
    """
    if not prompt_ids:
        raise ConfigError("no calibration prompts")
    if new_tokens < 1:
        raise ConfigError(f"calibration needs at least 1 new token per prompt, got {new_tokens}")
    limit = max_positions(target)
    vocab = vocab_size_of(target)
    rows = []
    for ids in prompt_ids:
        ids = list(ids)
        if not ids:
            raise ConfigError("a calibration prompt has no tokens")
        if min(ids) < 0 or (vocab is not None and max(ids) >= vocab):
            raise ModelMismatchError(
                f"prompt token id {max(ids) if min(ids) >= 0 else min(ids)} is outside the target's vocabulary of {vocab} tokens "
                "(tokenizer and model do not belong together?)"
            )
        if limit is not None and len(ids) + new_tokens > limit:
            ids = ids[: max(1, limit - new_tokens)]
            if len(ids) + new_tokens > limit:
                raise ConfigError(f"{new_tokens} new tokens do not fit the target's {limit} positions")
        rows.append((ids, greedy_continuation(target, ids, new_tokens)))
    length = max(len(p) + len(c) for p, c in rows)
    input_ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    scored = torch.zeros((len(rows), length), dtype=torch.bool)
    for row, (prompt, continuation) in enumerate(rows):
        window = prompt + continuation
        input_ids[row, : len(window)] = torch.tensor(window)
        # position t predicts token t + 1: continuation tokens sit at len(prompt) .. len(window) - 1
        scored[row, len(prompt) - 1 : len(window) - 1] = True
    return TokenWindows(input_ids, scored)


def batch_size_for(windows, max_tokens: int = BATCH_TOKENS, vocab: int | None = None) -> int:
    """Windows per forward: all of them when they fit in ``max_tokens`` tokens (one teacher-forced
    forward per mask over the whole calibration set), else as many as fit; with ``vocab``, also no
    more than keep a forward's logits within :data:`LOGITS_ELEMENTS`."""
    ids = getattr(windows, "input_ids", None)
    if ids is None or ids.dim() != 2:
        return 16
    width = max(1, int(ids.size(1)))
    fit = max_tokens // width
    if vocab:
        fit = min(fit, LOGITS_ELEMENTS // (width * vocab))
    return max(1, min(int(ids.size(0)), fit))


@torch.no_grad()
def scored_log_probs(model: nn.Module, windows: TokenWindows, batch_size: int | None = 16,
                     before_batch: Callable[[int], None] | None = None) -> torch.Tensor:
    """Teacher-forced log-probabilities at the scored positions, shape ``(tau, V)``, float32.

    ``batch_size`` None: :func:`batch_size_for` with the model's vocabulary. ``before_batch(i)`` runs
    before the forward of the i-th batch (the prefix-cached objective injects that batch's stored
    hidden states). Each batch's rows are written into one ``(tau, V)`` tensor as they come, so the
    result is never held twice.
    """
    if hasattr(windows, "log_probs"):  # encoder-decoder windows (viasd_adapt.search.seq2seq_windows) score themselves
        return windows.log_probs(model, batch_size or 16)
    batch_size = batch_size or batch_size_for(windows, vocab=vocab_size_of(model))
    out: torch.Tensor | None = None
    filled = 0
    trims = accepts_logits_to_keep(model)
    device = input_device(model)
    for number, start in enumerate(range(0, windows.input_ids.size(0), batch_size)):
        if before_batch is not None:
            before_batch(number)
        ids = windows.input_ids[start : start + batch_size].to(device)  # windows live on the CPU, the model anywhere
        scored = windows.scored[start : start + batch_size].to(device)
        if trims:
            # the LM head is a large share of a small model's forward: project only the columns
            # from the first scored position on (HF's logits_to_keep keeps the last N columns)
            first = int(scored.any(dim=0).nonzero()[0])
            logits = model(input_ids=ids, use_cache=False, logits_to_keep=ids.size(1) - first).logits
            scored = scored[:, first:]
        else:
            logits = model(input_ids=ids, use_cache=False).logits
        rows = torch.log_softmax(logits[scored].float(), dim=-1)
        del logits
        if out is None:
            out = rows.new_empty((windows.num_scored, rows.size(-1)))
        out[filled : filled + rows.size(0)] = rows
        filled += rows.size(0)
    return out if out is not None else torch.empty((0, vocab_size_of(model) or 0))


def build_calibration(
    target: nn.Module,
    draft: nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    new_tokens: int = DEFAULT_NEW_TOKENS,
    pad_id: int = 0,
    batch_size: int | None = None,
    windows: TokenWindows | None = None,
) -> CalibrationSet:
    """Greedy windows from the target (or ``windows``, e.g. from a :class:`WindowCache`), then p's
    and q's scored log-probs (once)."""
    check_drafter_pair(target, draft)
    if windows is None:
        windows = build_windows(target, prompt_ids, new_tokens, pad_id)
    logp_full = scored_log_probs(target, windows, batch_size)
    logp_draft = scored_log_probs(draft, windows, batch_size)
    if logp_full.shape != logp_draft.shape:  # defensive: heads that disagree with their config
        raise ModelMismatchError(f"drafter and target logits differ in shape: {tuple(logp_draft.shape)} vs {tuple(logp_full.shape)}")
    if not torch.isfinite(logp_full).any(dim=-1).all():
        raise ViasdError("the target produced non-finite log-probabilities on the calibration window")
    return CalibrationSet(windows, logp_draft, logp_full)


# ---------------------------------------------------------------------------- the window cache

#: 2: every entry carries a digest of its content (files of format 1 are read as unusable and regenerated).
WINDOW_CACHE_FORMAT = 2


def weights_digest(model: nn.Module) -> str:
    """A digest of every parameter and buffer (names, dtypes, shapes and bytes) and the config.

    Unlike the mask fingerprint (a tolerant sketch of a few tensors, meant to survive dtype casts),
    this changes with any weight: a cached greedy continuation is only valid for exactly the model
    that produced it. Hashing SmolLM2-135M's 540 MB takes about a second; calibrating it, minutes.
    """
    import hashlib

    digest = hashlib.blake2b(digest_size=20)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        digest.update(config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(model.state_dict(keep_vars=False).items()):
        if tensor.device.type == "meta":
            digest.update(f"{name}:meta:{tuple(tensor.shape)}".encode())
            continue
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{data.dtype}:{tuple(data.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def window_key(weights: str, prompt_ids: Sequence[Sequence[int]], new_tokens: int, pad_id: int) -> str:
    """What a set of greedy windows depends on: the target's weights, the prompt token ids (so the
    prompt text, its template and its cut), the number of new tokens and the pad id."""
    import hashlib

    from viasd_adapt.io import key_text

    payload = key_text({"format": WINDOW_CACHE_FORMAT, "weights": weights, "prompts": [list(map(int, p)) for p in prompt_ids],
                        "new_tokens": int(new_tokens), "pad_id": int(pad_id)}, compact=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def windows_digest(input_ids: torch.Tensor, scored: torch.Tensor) -> str:
    """The digest a cache entry stores with its windows (:func:`viasd_adapt.cache_check.tensors_digest`)."""
    from viasd_adapt.cache_check import tensors_digest

    return tensors_digest({"input_ids": input_ids, "scored": scored})


def window_entry_problem(entry: object, prompt_ids: Sequence[Sequence[int]], new_tokens: int,
                         vocab: int | None) -> str | None:
    """Why a cached entry cannot be the windows of ``prompt_ids`` (None: it can).

    Checked before use, so that a damaged or hand-edited entry is regenerated instead of scored on
    (or crashing an index inside torch): both tensors present with the dtypes :func:`build_windows`
    writes (int64 ids, bool scored) and one ``(W, T)`` shape, one row per prompt; the content
    matching the digest stored with it; every id inside the target's vocabulary; and each row being
    its prompt (possibly cut to fit the positions) followed by exactly ``new_tokens`` scored
    continuation positions."""
    if not isinstance(entry, dict):
        return "not a windows entry"
    ids, scored, digest = entry.get("input_ids"), entry.get("scored"), entry.get("digest")
    if not isinstance(ids, torch.Tensor) or not isinstance(scored, torch.Tensor):
        return "its token ids or scored positions are missing"
    if ids.dtype != torch.long:
        return f"its token ids are {str(ids.dtype).replace('torch.', '')}, not int64"
    if scored.dtype != torch.bool:
        return f"its scored positions are {str(scored.dtype).replace('torch.', '')}, not bool"
    if ids.dim() != 2 or ids.shape != scored.shape or ids.shape[0] != len(prompt_ids):
        return (f"its windows have shape {tuple(ids.shape)} (scored {tuple(scored.shape)}), not one row per prompt "
                f"({len(prompt_ids)})")
    if not isinstance(digest, str) or digest != windows_digest(ids, scored):
        return "its content does not match the digest stored with it (damaged or edited)"
    if ids.numel() and (int(ids.min()) < 0 or (vocab is not None and int(ids.max()) >= vocab)):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        return f"token id {bad} is outside the target's vocabulary of {vocab}"
    ends = []
    for row, prompt in enumerate(prompt_ids):
        positions = scored[row].nonzero().flatten().tolist()
        if len(positions) != new_tokens or positions != list(range(positions[0], positions[0] + new_tokens)):
            return f"window {row} does not score {new_tokens} consecutive continuation positions"
        kept = positions[0] + 1  # the prompt's tokens in the window (it may have been cut to fit)
        if kept > len(prompt) or ids[row, :kept].tolist() != [int(t) for t in prompt[:kept]]:
            return f"window {row} does not start with its prompt"
        ends.append(kept + new_tokens)
    if ids.shape[1] != max(ends):
        return f"its windows are {ids.shape[1]} positions wide, not the {max(ends)} of its prompts and new tokens"
    return None


class WindowCache:
    """The target's greedy calibration (and held-out) windows, kept in one file beside the mask.

    Greedy generation is the slow part of calibrating (one target forward per new token and
    prompt); the windows are a pure function of (target weights, prompt ids, new tokens, pad id),
    so they are stored under a key of exactly those (:func:`window_key`). A different target,
    prompt, template, cut or length gives another key: a miss, regenerated. :meth:`save` keeps
    only the entries this run used, so stale windows do not accumulate.

    What is read back is checked before it is used (:func:`window_entry_problem`): each entry
    carries a digest of its content, and an entry with another digest, shape or dtype, or with ids
    outside the vocabulary, is unusable: said in one line (``say``, else a
    :class:`~viasd_adapt.cache_check.CacheEntryWarning`) and regenerated. So is a file that cannot be
    read, or one written in an older format.

    Attributes:
        hits, misses: lookups answered from the file / generated (unusable entries included).
        unusable: lookups whose stored entry failed its check.
        generate_seconds: time spent generating on misses.
    """

    def __init__(self, path: str | Path | None, say: Callable[[str], None] | None = None):
        self.path = Path(path) if path is not None else None
        self.say = say
        self.entries: dict[str, dict] = {}
        self.used: set[str] = set()
        self.hits = self.misses = self.unusable = 0
        self.generate_seconds = 0.0
        self._weights: dict[int, str] = {}
        if self.path is not None and self.path.is_file():
            self.entries = self._read(self.path)

    def _read(self, path: Path) -> dict[str, dict]:
        from viasd_adapt.cache_check import report_unusable

        what = f"the calibration window cache {path}"
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - a cache that cannot be read is regenerated, never an error
            report_unusable(what, "it cannot be read as a torch file of tensors", self.say, stacklevel=4)
            return {}
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            report_unusable(what, "it is not a window cache", self.say, stacklevel=4)
            return {}
        if data.get("format") != WINDOW_CACHE_FORMAT:
            report_unusable(what, f"written in format {data.get('format')!r}, this version reads {WINDOW_CACHE_FORMAT} "
                            "(entries with content digests)", self.say, stacklevel=4)
            return {}
        return dict(data["entries"])

    def _digest(self, target: nn.Module) -> str:
        if id(target) not in self._weights:
            self._weights[id(target)] = weights_digest(target)
        return self._weights[id(target)]

    def windows(self, target: nn.Module, prompt_ids: Sequence[Sequence[int]], new_tokens: int = DEFAULT_NEW_TOKENS,
                pad_id: int = 0) -> TokenWindows:
        import time

        key = window_key(self._digest(target), prompt_ids, new_tokens, pad_id)
        self.used.add(key)
        entry = self.entries.get(key)
        if entry is not None:
            problem = window_entry_problem(entry, prompt_ids, new_tokens, vocab_size_of(target))
            if problem is None:
                self.hits += 1
                return TokenWindows(entry["input_ids"], entry["scored"])
            from viasd_adapt.cache_check import report_unusable

            self.unusable += 1
            report_unusable(f"a calibration window entry of {self.path.name if self.path else 'the cache'}", problem,
                            self.say, stacklevel=3)
        self.misses += 1
        started = time.perf_counter()
        windows = build_windows(target, prompt_ids, new_tokens, pad_id)
        self.generate_seconds += time.perf_counter() - started
        self.entries[key] = {"input_ids": windows.input_ids, "scored": windows.scored,
                             "digest": windows_digest(windows.input_ids, windows.scored)}
        return windows

    def save(self) -> Path | None:
        if self.path is None:
            return None
        from viasd_adapt.io import write_atomic

        data = {"format": WINDOW_CACHE_FORMAT, "entries": {k: v for k, v in self.entries.items() if k in self.used}}
        return write_atomic(self.path, lambda tmp: torch.save(data, tmp), "calibration window cache")

    def report(self) -> dict:
        # the file's name only: an artifact must not carry a path of the machine that made it
        return {"path": self.path.name if self.path else None, "hits": self.hits, "misses": self.misses,
                "generate_seconds": round(self.generate_seconds, 2)}


def window_cache_path(mask_path: str | Path) -> Path:
    """Where the window cache of a mask artifact lives: ``mask.json`` -> ``mask.windows.pt``."""
    mask_path = Path(mask_path)
    return mask_path.with_name(mask_path.stem + ".windows.pt")
