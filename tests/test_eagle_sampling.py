"""EAGLE adapter, lossless sampling: the output is exactly the target's distribution.

Split from test_eagle.py (same tiny fixtures, from conftest.py) to keep each file's run short.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("eagle.model.ea_model")

from tests.support.eagle import MASK, prompts  # noqa: E402
from viasd_adapt.adapters import eagle  # noqa: E402
from viasd_adapt.settings import TierSettings  # noqa: E402

torch.set_num_threads(1)


# --------------------------------------------------------------------------- lossless sampling: a statistical test


def _calibration_statistics(stock, prompt: torch.Tensor, samples: list[list[int]], processor):
    """Two checks of sampled tokens against the target's exact (warped) conditionals.

    * randomised PIT values: for an exact sampler they are i.i.d. Uniform(0, 1) whatever the
      prefix (Rosenblatt), so they test the whole joint law, not one marginal;
    * a z-score of the sampled tokens' own probability q(x) against its exact expectation
      sum_v q(v)^2: sensitive to mass put on the wrong tokens, which the PIT (an ordering of the
      vocabulary) may miss.
    """
    generator = torch.Generator().manual_seed(123)
    pit, excess, variance = [], 0.0, 0.0
    with torch.no_grad():
        for tokens in samples:
            ids = torch.cat([prompt, torch.tensor([tokens])], dim=1)
            logits = stock(input_ids=ids).logits[0, prompt.shape[1] - 1 : -1].double()
            probs = processor(None, logits).softmax(-1)
            for row, token in zip(probs, tokens):
                pit.append(float(row[:token].sum()) + float(torch.rand((), generator=generator)) * float(row[token]))
                second, third = float((row**2).sum()), float((row**3).sum())
                excess += float(row[token]) - second
                variance += third - second**2
    return torch.tensor(pit), excess / variance**0.5


@pytest.mark.parametrize("strategy", ["route", "cascade"])
def test_lossless_sampling_matches_the_target_distribution(ea_model, tiny_eagle, strategy):
    from eagle.model.utils import prepare_logits_processor
    from scipy.stats import kstest
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(tiny_eagle / "target", dtype=torch.float32).eval()
    prompt = prompts(ea_model, 1)[0][:, :12]
    processor = prepare_logits_processor(temperature=0.8, top_p=0.9)
    torch.manual_seed(2024)
    samples, slim_tokens = [], 0
    for _ in range(80):
        result = eagle.generate(ea_model, prompt, 4, mask=MASK, settings=TierSettings(mode="lossless"),
                                temperature=0.8, top_p=0.9, options=eagle.EagleOptions(lossless_strategy=strategy))
        samples.append(result.tokens)
        slim_tokens += result.metrics.slim_tokens + result.metrics.draft_tokens
    assert slim_tokens > 80  # the cascade really produced most tokens, not q alone
    pit, z = _calibration_statistics(stock, prompt, samples, processor)
    assert kstest(pit.numpy(), "uniform").pvalue > 1e-3
    assert abs(z) < 4.0
    # the same statistics have power: tokens from a wrong distribution (shifted ids) are rejected
    shifted = [[(t + 1) % stock.config.vocab_size for t in s] for s in samples]
    _, z_wrong = _calibration_statistics(stock, prompt, shifted, processor)
    assert z_wrong < -4.0
