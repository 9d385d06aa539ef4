"""How faithful a row's output is to the target: likelihood, agreement, overrules, a task score.

Speed alone says nothing about a lossy mode, so every row carries fidelity next to its cost:

* **target log-likelihood** per generated token: the target's mean ``log q(x_t | prefix)`` over the
  row's output, teacher-forced; its *drop* from the target's own greedy output on the same prompts
  (positive = the row wrote text the target finds less likely). Whole-sequence likelihoods vary a
  lot between continuations once two outputs diverge, so the drop is noisy on a few prompts;
* **regret** per generated token: the mean of ``max_v log q(v | prefix) - log q(x_t | prefix)``
  over the row's own output, teacher-forced: how much likelier the target's own choice was at each
  position. Zero for the target's greedy output, never negative, and local to each token, so it is
  far steadier than the drop;
* **agreement** with the target's greedy output: positional (token t equals the reference's token
  t; everything after a first divergence counts as a miss) and teacher-forced (token t is the
  target's argmax given the row's own prefix);
* **overrule rate** by tier, from the audit (modes audit and lenient, where q is at hand);
* **next-line exact match** on held-out real code: the prompt is whole lines of a held-out file, the
  row writes the line break and the next line, which is compared with the file's true next line.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from viasd_adapt.model_kind import is_encoder_decoder
from viasd_adapt.routing.runner import accepts_logits_to_keep


@dataclass(frozen=True)
class OutputScore:
    """Teacher-forced scores of one output under the target."""

    log_likelihood: float  # summed over the output's tokens
    argmax_matches: int  # tokens that are the target's argmax given their own prefix
    tokens: int
    regret: float = 0.0  # summed max_v log q(v | prefix) - log q(x_t | prefix)


@torch.no_grad()
def score_output(target: nn.Module, prompt_ids: list[int], tokens: list[int]) -> OutputScore:
    """One forward of ``prompt + tokens`` through the target (an encoder-decoder target reads the
    prompt as its source and ``tokens`` after its decoder start token)."""
    if not tokens:
        return OutputScore(0.0, 0, 0)
    device = next(target.parameters()).device
    if is_encoder_decoder(target):  # the prompt is the source; the output is scored by the decoder after its start token
        from viasd_adapt.routing.seq2seq import default_decoder_prompt

        start = default_decoder_prompt(target)
        source = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        decoder_ids = torch.tensor([start + tokens], dtype=torch.long, device=device)
        logits = target(input_ids=source, decoder_input_ids=decoder_ids, use_cache=False).logits[0, len(start) - 1 : -1]
        logits = logits.float()
    else:
        ids = torch.tensor([prompt_ids + tokens], dtype=torch.long, device=device)
        if accepts_logits_to_keep(target):  # the head over the scored columns only (a long prompt's logits are large)
            logits = target(input_ids=ids, use_cache=False, logits_to_keep=len(tokens) + 1).logits[0, :-1].float()
        else:
            logits = target(input_ids=ids, use_cache=False).logits[0, len(prompt_ids) - 1 : -1].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = torch.tensor(tokens, device=log_probs.device)
    picked = log_probs.gather(-1, chosen[:, None]).squeeze(-1)
    best = log_probs.max(dim=-1)
    matches = int((best.indices == chosen).sum())
    return OutputScore(float(picked.sum()), matches, len(tokens), float((best.values - picked).sum()))


def positional_agreement(tokens: list[int], reference: list[int]) -> int:
    """Number of positions where ``tokens`` equals ``reference`` (prefix-aligned, no re-alignment)."""
    return sum(int(a == b) for a, b in zip(tokens, reference))


def next_line(text: str) -> str | None:
    """The line a continuation starts: what follows its first line break, up to the next one,
    trailing whitespace removed; None when the continuation never breaks the line."""
    if "\n" not in text:
        return None
    return text.split("\n", 2)[1].rstrip()


def next_line_match(tokenizer, tokens: list[int], true_line: str) -> bool:
    """Whether the row ended the prompt's last line at once and wrote exactly the file's next line
    (indentation included)."""
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    return text.split("\n", 1)[0].strip() == "" and next_line(text) == true_line.rstrip()


__all__ = ["OutputScore", "next_line", "next_line_match", "positional_agreement", "score_output"]
