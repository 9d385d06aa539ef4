"""Terminal rendering of generated text with each token's tier visible (shared by generate, demo, bench).

Colour when the output is a terminal; otherwise plain-text markers, so that a log file or a pipe
still shows which tier committed what. Tier 1 (draft accepted) is left unmarked in plain mode
because it is the common case and marking it would bury the text.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Sequence

import click

from viasd_adapt.core.tiers import Tier

TIER_LABELS = {
    Tier.DRAFT: "draft accepted (tier 1)",
    Tier.SLIM: "slim verifier (tier 2)",
    Tier.FULL: "full verifier (tier 3)",
}
TIER_COLOURS = {Tier.DRAFT: "green", Tier.SLIM: "yellow", Tier.FULL: "red"}
# (open, close) around a token in plain mode. Guillemets, because brackets are common in code.
PLAIN_MARKERS = {Tier.DRAFT: ("", ""), Tier.SLIM: ("\u2039", "\u203a"), Tier.FULL: ("\u00ab", "\u00bb")}


def token_pieces(tokenizer, tokens: Sequence[int]) -> list[str]:
    """The text each token adds, so that the pieces concatenate to ``tokenizer.decode(tokens)``.

    Decodes growing prefixes rather than single tokens: byte-level BPE tokens can be partial UTF-8
    characters or carry spaces that only render correctly in context. A token whose bytes are not
    yet a full character contributes "" and the character appears with the token that completes it.
    """
    pieces: list[str] = []
    shown = ""
    for i in range(len(tokens)):
        text = tokenizer.decode(list(tokens[: i + 1]), skip_special_tokens=False)
        if text.startswith(shown) and not text.endswith("\ufffd"):
            pieces.append(text[len(shown) :])
            shown = text
        else:
            pieces.append("")
    if pieces and tokens:
        final = tokenizer.decode(list(tokens), skip_special_tokens=False)
        if final.startswith(shown):
            pieces[-1] += final[len(shown) :]
    return pieces


def style_piece(piece: str, tier: int | None, colour: bool) -> str:
    """One token's text, coloured (``colour``) or wrapped in its plain marker; as it is when its
    tier is unknown (None: a run that keeps no tiers)."""
    if tier is None or not piece:
        return piece
    tier = Tier(int(tier))
    if colour:
        return click.style(piece, fg=TIER_COLOURS[tier], bold=tier is Tier.FULL)
    opening, closing = PLAIN_MARKERS[tier]
    return f"{opening}{piece}{closing}"


def render_tiers(pieces: Sequence[str], tiers: Sequence[int], colour: bool) -> str:
    """The completion with each token styled by its tier."""
    if len(pieces) != len(tiers):
        raise ValueError(f"{len(pieces)} token pieces but {len(tiers)} tiers")
    return "".join(style_piece(piece, tier, colour) for piece, tier in zip(pieces, tiers))


class TokenStream:
    """Writes a generation's text as its tokens are committed, each piece styled by its tier.

    ``push(tokens, tiers)`` may come from any thread (PEARL verifies on its own); pieces are
    decoded as in :func:`token_pieces` (the whole text so far, so that spaces and multi-byte
    characters render as in the final text; a token that ends inside a character shows with the
    token that completes it). ``limit`` and ``eos`` stop the stream where the output ends (the
    budget; the first end-of-sequence token), so a framework that decides a few tokens more than it
    outputs does not show them. An end-of-sequence token ends the answer and is not written (a chat
    model's end-of-turn marker is not answer text). ``show_tiers=False`` writes plain text.
    """

    def __init__(self, tokenizer, write: Callable[[str], None], show_tiers: bool = True, colour: bool = False,
                 limit: int | None = None, eos: Iterable[int] = ()):
        self.tokenizer, self.write = tokenizer, write
        self.show_tiers, self.colour = show_tiers, colour
        self.limit, self.eos = limit, frozenset(int(t) for t in eos)
        self.tokens: list[int] = []  # every token received up to the stop, an end-of-sequence token included
        self.tiers: list[int | None] = []
        self._text_tokens: list[int] = []  # the tokens whose text is written
        self.shown = ""
        self.ended = False
        self._lock = threading.Lock()

    def push(self, tokens: Sequence[int], tiers: Sequence[int] | None = None) -> None:
        with self._lock:
            for index, token in enumerate(tokens):
                if self.ended:
                    return
                token = int(token)
                self.tokens.append(token)
                self.tiers.append(None if tiers is None else int(tiers[index]))
                at_limit = self.limit is not None and len(self.tokens) >= self.limit
                self.ended = token in self.eos or at_limit
                if token not in self.eos:
                    self._text_tokens.append(token)
                    self._emit(final=self.ended)

    def _emit(self, final: bool = False) -> None:
        text = self.tokenizer.decode(self._text_tokens, skip_special_tokens=False)
        if not text.startswith(self.shown) or (text.endswith("\ufffd") and not final):
            return  # the last token ends inside a character: it shows with the token that completes it
        piece, self.shown = text[len(self.shown):], text
        if piece:
            self.write(style_piece(piece, self.tiers[-1], self.colour) if self.show_tiers else piece)

    def close(self) -> None:
        """Writes what an unfinished character held back."""
        with self._lock:
            if self._text_tokens:
                self._emit(final=True)

    @property
    def text(self) -> str:
        """The text written so far, without styling."""
        return self.shown

    @property
    def count(self) -> int:
        """Tokens received (up to the stop)."""
        return len(self.tokens)


def legend(colour: bool) -> str:
    """One line explaining the styles used by :func:`render_tiers`."""
    parts = []
    for tier in (Tier.DRAFT, Tier.SLIM, Tier.FULL):
        if colour:
            parts.append(click.style(TIER_LABELS[tier], fg=TIER_COLOURS[tier], bold=tier is Tier.FULL))
        else:
            opening, closing = PLAIN_MARKERS[tier]
            sample = f"{opening}text{closing}" if opening else "plain text"
            parts.append(f"{sample} = {TIER_LABELS[tier]}")
    return "legend: " + ("  ".join(parts) if colour else "; ".join(parts))


def run_summary(framework: str, mode: str, tokens: int, seconds: float, fields: Sequence[str] = ()) -> str:
    """The one-line summary ``viasd generate`` closes with: what ran, how many tokens in how long,
    then ``fields`` (the tiers' digest, and whatever a run reports beside it), joined by " | "."""
    rate = f" ({tokens / seconds:.1f} tokens/s)" if seconds > 0 else ""
    return " | ".join([f"[{framework} / {mode}] {tokens} tokens in {seconds:.2f}s{rate}", *fields])


def metrics_summary(metrics) -> str:
    """A one-line digest of a :class:`~viasd_adapt.core.metrics.TierMetrics`."""
    line = (
        f"{metrics.committed} tokens: {metrics.draft_tokens} draft, {metrics.slim_tokens} slim, "
        f"{metrics.full_tokens} full | rejection rate {metrics.rejection_rate:.2f} | "
        f"mean accepted length {metrics.mean_accepted_length:.2f} | "
        f"full passes/token {metrics.full_passes_per_token:.2f} | slim passes/token {metrics.slim_passes_per_token:.2f}"
    )
    if metrics.escalated_cycles:
        line += f" | escalations {metrics.escalated_cycles}/{metrics.cycles} cycles"
    if metrics.resumed_full_passes:
        line += f" ({metrics.resumed_full_passes} full passes resumed at the shared prefix)"
    if metrics.overrule_rate is not None:
        by_tier = ", ".join(f"tier {t} {v:.3f}" for t, v in metrics.overrule_rate_by_tier.items() if v is not None)
        line += f" | audit: overrule rate {metrics.overrule_rate:.3f} ({by_tier}), TV {metrics.tv_distance:.3f}"
    return line


__all__ = ["PLAIN_MARKERS", "TIER_COLOURS", "TIER_LABELS", "TokenStream", "legend", "metrics_summary", "render_tiers", "run_summary",
           "style_piece", "token_pieces"]
