"""The slim tier inside HF transformers assisted generation, on a named pair.

    python examples/hf_generate.py                          # the shipped demo pair, every mode
    python examples/hf_generate.py --pair smollm2 --prompt "What is speculative decoding?"

``hf.tiered`` is a scope around your own ``target.generate(..., assistant_model=...)`` call: inside
it the call verifies through the tier, outside it transformers runs untouched. ``pair`` is what
:func:`viasd_adapt.load_pair` returns (target, drafter, tokenizer, mask and tuned settings); a
target model and a ``mask=`` path work the same way.
"""

from __future__ import annotations

import argparse

import viasd_adapt
from viasd_adapt import TierSettings, load_pair
from viasd_adapt.adapters import hf

MODES = ("none", "lenient", "lossless", "lossy")


def main(argv: list[str] | None = None) -> dict[str, list[int]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", default="demo")
    parser.add_argument("--prompt", default="def fibonacci(n):")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)

    pair = load_pair(args.pair)
    ids = pair.tokenizer(args.prompt, return_tensors="pt").input_ids
    outputs = {}
    for mode in MODES:
        with hf.tiered(pair, context=viasd_adapt.context(pair, settings=TierSettings(mode=mode))) as session:
            out = pair.target.generate(ids, assistant_model=pair.draft, max_new_tokens=args.max_new_tokens,
                                       do_sample=False)
        outputs[mode] = out[0, ids.shape[1]:].tolist()
        m = session.last_metrics
        print(f"--- {mode}: {m.cycles} cycles, tier on {m.tier_cycles}, full passes/token {m.full_passes_per_token:.2f}")
        print(args.prompt + pair.tokenizer.decode(outputs[mode], skip_special_tokens=True))
    return outputs


if __name__ == "__main__":
    main()
