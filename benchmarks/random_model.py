"""A random-weight Llama saved as a model folder, with the shipped demo pair's tokenizer: a stand-in
for a user's own model where no checkpoint can be downloaded (``gpu_check.sh`` onboards one with
``viasd models add --device cuda``).

    python benchmarks/random_model.py OUT_DIR --layers 24 --hidden 1024 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_random_llama(out: Path, layers: int, hidden: int, dtype: str, seed: int = 0) -> int:
    """Writes the model and the demo tokenizer into ``out``; returns the parameter count."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from viasd_adapt.models.registry import demo_pair_paths

    tokenizer = AutoTokenizer.from_pretrained(str(demo_pair_paths().target))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                         num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                         num_key_value_heads=max(1, hidden // 64), max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    with torch.device("meta"):
        count = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    model = LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    count = write_random_llama(args.out, args.layers, args.hidden, args.dtype)
    print(f"random Llama, {count / 1e6:.0f}M parameters, {args.dtype} -> {args.out}")


if __name__ == "__main__":
    main()
