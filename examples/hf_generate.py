"""An ordinary transformers assisted-generation script, with the VIA-SD slim tier added.

The three lines marked ``# viasd`` are the whole change (plus indenting the ``generate`` call under
the ``with``); without them this is the stock script.
It uses the demo pair shipped with viasd-adapt; any target/drafter pair that shares a tokenizer
works the same way, given a mask searched for that target (``viasd search``).

    python examples/hf_generate.py "def fibonacci(n):" --mode lossy
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from viasd_adapt.adapters import hf  # viasd
from viasd_adapt.models.registry import demo_pair_paths

parser = argparse.ArgumentParser()
parser.add_argument("prompt", nargs="?", default="def fibonacci(n):")
parser.add_argument("--mode", default="lossy", choices=["none", "lenient", "lossless", "lossy", "audit"])
parser.add_argument("--max-new-tokens", type=int, default=48)
args = parser.parse_args()

pair = demo_pair_paths()  # target/, draft/ and mask.json of the shipped demo pair
tokenizer = AutoTokenizer.from_pretrained(pair.target)
target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
drafter = AutoModelForCausalLM.from_pretrained(pair.draft, dtype=torch.float32).eval()
inputs = tokenizer(args.prompt, return_tensors="pt")

with hf.tiered(target, mask=pair.mask, settings=hf.TierSettings(mode=args.mode)) as session:  # viasd
    out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=args.max_new_tokens, do_sample=False)

print(tokenizer.decode(out[0], skip_special_tokens=True))
print(session.metrics.to_dict())  # viasd
