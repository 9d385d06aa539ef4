"""Wrap an existing eagle-llm pipeline with the VIA-SD slim tier.

    python examples/eagle_pipeline.py                 # the shipped demo pair
    python examples/eagle_pipeline.py --pair tiny     # a pair built with `viasd models build --recipe tiny`

The pair needs ``eagle_head/`` (trained here on the fly if missing: a few hundred steps on CPU)
and ideally ``mask.json`` from `viasd search`; without one a random mask is used.
"""

from __future__ import annotations

import argparse

import torch

from viasd_adapt.adapters import eagle
from viasd_adapt.models.corpus import heldout_prompts
from viasd_adapt.models.registry import resolve_pair
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.routing.mask import random_mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="demo")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    pair = resolve_pair(args.pair)
    head = pair.eagle_head
    if head is None:
        from viasd_adapt.models.eagle_head import train_eagle_head

        head = train_eagle_head(pair.target, pair.root / "eagle_head", seed=0, steps=200, progress=True)

    # 1. the user's existing pipeline: an EaModel (loaded transformers-5 safe and checked)
    ea_model = eagle.load_ea_model(pair.target, head)
    print("sanity check vs stock transformers:", ea_model.viasd_sanity)
    layers = ea_model.base_model.config.num_hidden_layers
    mask = pair.mask or random_mask(layers, 0.45, torch.Generator().manual_seed(0))

    tokenizer = ea_model.get_tokenizer()
    input_ids = tokenizer(heldout_prompts(1, seed=0)[0], return_tensors="pt").input_ids

    # 2. the same pipeline, with the slim tier: a scope around the user's own eagenerate call
    # (lenient is the simple lossy baseline, no slim tier: compare it with lossy at equal fidelity)
    for mode in ("none", "lenient", "lossless", "lossy", "audit"):
        needs_mask = TierSettings(mode=mode).mode.uses_slim
        with eagle.tiered(ea_model, mask=mask if needs_mask else None, settings=TierSettings(mode=mode)) as session:
            ea_model.eagenerate(input_ids, temperature=args.temperature, max_new_tokens=args.max_new_tokens)
        m = session.last_metrics
        print(f"{mode:9s} rejection rate {m.rejection_rate:.3f}  tokens/cycle {m.mean_accepted_length:.2f}  "
              f"full passes {m.full_passes}  slim passes {m.slim_passes}  overrule {m.overrule_rate}")

    # 3. or the helper that also trims eagle's max_new_tokens overshoot and stops at EOS
    result = eagle.generate(ea_model, input_ids, args.max_new_tokens, mask=mask, settings=TierSettings(mode="lossy"))
    print(tokenizer.decode(result.tokens))


if __name__ == "__main__":
    main()
