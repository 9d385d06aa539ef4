"""PEARL with the VIA-SD slim tier, on the demo pair shipped with viasd-adapt.

    python examples/pearl.py ["def parse_args(argv):"]

Runs PEARL (drafter and target on two threads) without the tier and with it in every mode, and
prints each completion with its metrics. The same thing from the shell:

    viasd generate --framework pearl --mode lossy --prompt "def parse_args(argv):"
"""

from __future__ import annotations

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.models.registry import demo_pair_paths
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


def main(prompt: str = "def parse_args(argv):") -> None:
    pair = demo_pair_paths()  # target/, draft/ and mask.json inside the package
    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(pair.draft, dtype=torch.float32).eval()
    prompt_ids = tokenizer(prompt)["input_ids"]

    for mode in ("none", "lenient", "lossless", "lossy", "audit"):
        out = pearl_generate(
            target,
            drafter,
            prompt_ids,
            max_new_tokens=48,
            settings=TierSettings(mode=mode, gamma=4),
            mask=pair.mask if mode != "none" else None,  # a mask.json is checked against the target
            sampling=SamplingConfig(do_sample=False),  # greedy; SamplingConfig(do_sample=True, temperature=0.8)
            parallel=True,  # False: the same tokens, one thread
            seed=0,
        )
        m, s = out.metrics, out.stats
        print(f"--- PEARL, mode {mode}: {s.rounds} rounds ({s.pre_verify_rounds} pre-verify), "
              f"{len(out.tokens) / s.wall_s:.1f} tokens/s, overlap {s.overlap:.2f}x")
        print(prompt + tokenizer.decode(out.tokens))
        print(f"rejection rate {m.rejection_rate:.2f}, full passes/token {m.full_passes_per_token:.2f}, "
              f"slim passes/token {m.slim_passes_per_token:.2f}, tiers (draft/slim/full) "
              f"{m.draft_tokens}/{m.slim_tokens}/{m.full_tokens}"
              + (f", audit: overrule rate {m.overrule_rate:.3f}, TV {m.tv_distance:.3f}" if m.audited else ""))


if __name__ == "__main__":
    main(*sys.argv[1:2])
