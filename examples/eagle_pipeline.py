"""An eagle-llm pipeline with the slim tier: a scope around your own ``eagenerate`` call.

    python examples/eagle_pipeline.py                 # the shipped demo pair and its EAGLE head
    python examples/eagle_pipeline.py --pair smollm2

The pair needs an EAGLE head (``eagle_head/``; ``viasd models build`` trains one). eagle-llm
1.2.1 is installed with ``--no-deps``; viasd-adapt makes it load on transformers 5 and checks
the loaded base model against stock transformers.
"""

from __future__ import annotations

import argparse

import viasd_adapt
from viasd_adapt import TierSettings, load_pair
from viasd_adapt.adapters import eagle

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
        with eagle.tiered(pair, context=viasd_adapt.context(pair, settings=TierSettings(mode=mode))) as session:
            out = session.ea_model.eagenerate(ids, temperature=0.0, max_new_tokens=args.max_new_tokens)
        outputs[mode] = out[0, ids.shape[1]:].tolist()
        m = session.last_metrics
        print(f"--- {mode}: {m.cycles} cycles, tokens/cycle {m.mean_accepted_length:.2f}, "
              f"full passes {m.full_passes}, slim passes {m.slim_passes}")
        print(args.prompt + pair.tokenizer.decode(outputs[mode], skip_special_tokens=True))
    return outputs


if __name__ == "__main__":
    main()
