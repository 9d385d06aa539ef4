"""PEARL (drafter and target on two threads) with the slim tier, on a named pair.

    python examples/pearl.py                     # the shipped demo pair, every mode
    python examples/pearl.py --pair demo-ee

The same from the shell: ``viasd generate --framework pearl --mode lossless --prompt "..."``.
"""

from __future__ import annotations

import argparse

import viasd_adapt
from viasd_adapt import TierSettings, load_pair
from viasd_adapt.adapters import pearl

MODES = ("none", "lenient", "lossless", "lossy", "audit")


def main(argv: list[str] | None = None) -> dict[str, list[int]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", default="demo")
    parser.add_argument("--prompt", default="def parse_args(argv):")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)

    pair = load_pair(args.pair)
    ids = pair.tokenizer(args.prompt)["input_ids"]
    outputs = {}
    for mode in MODES:
        # greedy by default; sampling=SamplingConfig(do_sample=True, temperature=0.8) samples
        out = pearl.generate(pair, ids, args.max_new_tokens,
                             context=viasd_adapt.context(pair, settings=TierSettings(mode=mode)), seed=0)
        outputs[mode] = out.tokens
        m, s = out.metrics, out.stats
        print(f"--- {mode}: {s.rounds} rounds, overlap {s.overlap:.2f}x, full passes/token "
              f"{m.full_passes_per_token:.2f}, slim passes/token {m.slim_passes_per_token:.2f}"
              + (f", overrule rate {m.overrule_rate:.3f}" if m.audited else ""))
        print(args.prompt + pair.tokenizer.decode(out.tokens, skip_special_tokens=True))
    return outputs


if __name__ == "__main__":
    main()
