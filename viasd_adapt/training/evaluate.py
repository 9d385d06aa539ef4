"""Measurements for the build report: held-out loss, argmax agreement and drafter acceptance.

Definitions (also stated in docs/method.md section 10):

* **held-out loss**: mean next-token cross-entropy (nats) on rows of held-out files.
* **argmax agreement** of a model with the target: on the same held-out rows, under teacher
  forcing, the fraction of positions where the model's most likely next token equals the full
  target's. This is what a verifier tier must reproduce to be useful (docs/method.md section 2).
* **greedy acceptance** of the drafter: for each held-out prompt the target writes a greedy
  continuation; the drafter is then run teacher-forced on prompt + continuation. Because every
  accepted token equals the target's, this replays greedy speculative decoding exactly. We report
  both the per-token match rate and the acceptance rate of standard greedy speculative decoding
  with ``speculation_length`` drafted tokens per round (accepted / drafted).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from viasd_adapt.training.layer_skip import skipped_layers


@torch.no_grad()
def _logits(model: LlamaForCausalLM, rows: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat(
        [model(input_ids=rows[i : i + batch_size], use_cache=False).logits for i in range(0, rows.size(0), batch_size)]
    )


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, rows: torch.Tensor, skip: Sequence[int] = (), batch_size: int = 8) -> float:
    """Mean next-token cross-entropy on ``rows``, optionally with layers skipped."""
    with skipped_layers(model, skip):
        logits = _logits(model, rows, batch_size)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1)).item()


@torch.no_grad()
def argmax_predictions(model: LlamaForCausalLM, rows: torch.Tensor, skip: Sequence[int] = (), batch_size: int = 8) -> torch.Tensor:
    """The model's teacher-forced argmax next token at every position of ``rows``."""
    with skipped_layers(model, skip):
        return _logits(model, rows, batch_size).argmax(-1)


def agreement(predictions: torch.Tensor, reference: torch.Tensor) -> float:
    """Fraction of positions where two argmax tensors agree."""
    return (predictions == reference).float().mean().item()


def speculative_acceptance(matches: Sequence[bool], speculation_length: int) -> tuple[int, int]:
    """(accepted, drafted) when greedy speculative decoding replays a known match sequence.

    ``matches[i]`` says whether the drafter's guess for continuation token ``i`` equals the
    target's. Each round drafts up to ``speculation_length`` tokens, accepts the matching prefix,
    and the target supplies one more token (the correction, or the bonus token).
    """
    accepted = drafted = position = 0
    while position < len(matches):
        window = matches[position : position + speculation_length]
        run = 0
        while run < len(window) and window[run]:
            run += 1
        accepted += run
        drafted += len(window)
        position += run + 1
    return accepted, drafted


@torch.no_grad()
def drafter_acceptance(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[str],
    new_tokens: int,
    speculation_length: int,
) -> dict:
    """Greedy acceptance of ``draft`` against ``target`` over ``prompts`` (see module docstring)."""
    matched = total = accepted = drafted = 0
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, return_tensors="pt").input_ids
        output = target.generate(
            prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
        continuation = output[0, prompt_ids.size(1) :]
        draft_logits = draft(input_ids=output[:, :-1], use_cache=False).logits[0]
        guesses = draft_logits[prompt_ids.size(1) - 1 :].argmax(-1)
        matches = (guesses == continuation).tolist()
        matched += sum(matches)
        total += len(matches)
        round_accepted, round_drafted = speculative_acceptance(matches, speculation_length)
        accepted += round_accepted
        drafted += round_drafted
    return {
        "prompts": len(prompts),
        "new_tokens_per_prompt": new_tokens,
        "token_match_rate": matched / max(1, total),
        "speculation_length": speculation_length,
        "speculative_acceptance_rate": accepted / max(1, drafted),
    }
