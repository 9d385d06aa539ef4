"""Random-weight GGUF models at the shape of Qwen2-0.5B-Instruct, written with ``gguf``'s writer.

    python benchmarks/qwen2_gguf.py OUT_DIR            # target.gguf (0.5B shape) and drafter.gguf

The target has the shape users bring (24 layers, hidden 896, 14 heads, 2 KV heads, intermediate
4864, vocabulary 151,936, an untied output head, q/k/v biases) and the tensor types of a Q4_K_M
file of that shape: K-quants need rows that are a multiple of 256 values, which only the down
projections have (4864 = 19 x 256; Q4_K and Q6_K alternating by layer), so llama.cpp stores every
matrix whose rows are 896 values long in its fallback, Q8_0, as here; norms and biases float32.
``gguf`` can dequantize K-quants but not quantize them, so the blocks are written directly: random
codes with small scales, which is what a block is (the layouts of ggml's ``block_q4_K``,
``block_q6_K`` and ``block_q8_0``). The drafter is a 2-layer model on the
same vocabulary and tokenizer (hidden 256), float16.

The tokenizer is a byte-level BPE of exactly 151,936 tokens: the 256 byte symbols, then every pair
of them, then triples, each new token with the merge that makes it, and a chat template. The
weights are random, so the text is nonsense: what this file measures is time and memory at the
real shape, not quality.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

VOCAB = 151_936
TARGET = dict(layers=24, hidden=896, heads=14, kv_heads=2, intermediate=4864)
DRAFTER = dict(layers=2, hidden=256, heads=4, kv_heads=2, intermediate=768)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
Q4_K_BYTES, Q6_K_BYTES, QK_K = 144, 210, 256
Q8_0_BYTES, QK8_0 = 34, 32


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level BPE vocabulary is made of)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    codes, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    order = sorted(zip(printable, codes))
    return [chr(code) for _, code in order]


def tokenizer_tables(size: int = VOCAB) -> tuple[list[str], list[str], list[int]]:
    """``(tokens, merges, token types)`` of a byte-level BPE with exactly ``size`` tokens."""
    symbols = byte_symbols()
    tokens, merges = list(symbols), []
    previous = list(symbols)
    while len(tokens) < size - len(SPECIAL):
        grown = []
        for left in previous:
            for right in symbols:
                if len(tokens) >= size - len(SPECIAL):
                    break
                tokens.append(left + right)
                merges.append(f"{left} {right}")
                grown.append(left + right)
        previous = grown
    tokens += SPECIAL
    types = [1] * (len(tokens) - len(SPECIAL)) + [3] * len(SPECIAL)
    return tokens, merges, types


def q4_k_blocks(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random ``block_q4_K`` rows: d and dmin (float16), 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit codes."""
    blocks = rows * cols // QK_K
    out = rng.integers(0, 256, size=(blocks, Q4_K_BYTES), dtype=np.uint8)
    out[:, 0:2] = np.frombuffer(np.float16(2.5e-4).tobytes(), dtype=np.uint8)  # d
    out[:, 2:4] = np.frombuffer(np.float16(1.875e-3).tobytes(), dtype=np.uint8)  # dmin: the mean weight near 0
    return out.reshape(rows, cols // QK_K * Q4_K_BYTES)


def q6_k_blocks(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random ``block_q6_K`` rows: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales, d (float16)."""
    blocks = rows * cols // QK_K
    out = rng.integers(0, 256, size=(blocks, Q6_K_BYTES), dtype=np.uint8)
    out[:, 192:208] = rng.integers(1, 16, size=(blocks, 16), dtype=np.uint8)  # positive, small scales
    out[:, 208:210] = np.frombuffer(np.float16(2e-4).tobytes(), dtype=np.uint8)  # d
    return out.reshape(rows, cols // QK_K * Q6_K_BYTES)


def q8_0_blocks(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random ``block_q8_0`` rows: d (float16) and 32 int8 codes."""
    blocks = rows * cols // QK8_0
    out = rng.integers(0, 256, size=(blocks, Q8_0_BYTES), dtype=np.uint8)
    out[:, 0:2] = np.frombuffer(np.float16(1.5e-4).tobytes(), dtype=np.uint8)
    return out.reshape(rows, cols // QK8_0 * Q8_0_BYTES)


def write_model(path: Path, shape: dict, seed: int, quantized: bool, tables) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens, merges, types = tables
    hidden, heads, kv, inter = shape["hidden"], shape["heads"], shape["kv_heads"], shape["intermediate"]
    head_dim = hidden // heads
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name(f"random qwen2 {shape['layers']}x{hidden}")
    writer.add_context_length(32768)
    writer.add_embedding_length(hidden)
    writer.add_block_count(shape["layers"])
    writer.add_feed_forward_length(inter)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(VOCAB)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(VOCAB - 3)
    writer.add_eos_token_id(VOCAB - 1)
    writer.add_pad_token_id(VOCAB - 3)
    writer.add_chat_template(CHAT_TEMPLATE)
    q4 = gguf.GGMLQuantizationType.Q4_K
    q6 = gguf.GGMLQuantizationType.Q6_K

    def matrix(name: str, rows: int, cols: int, kind=q4) -> None:
        if quantized:
            if cols % QK_K:  # llama.cpp's fallback for rows K-quants cannot split
                kind = gguf.GGMLQuantizationType.Q8_0
            blocks = {q4: q4_k_blocks, q6: q6_k_blocks}.get(kind, q8_0_blocks)
            writer.add_tensor(name, blocks(rng, rows, cols), raw_dtype=kind)
        else:
            writer.add_tensor(name, (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16))

    def vector(name: str, size: int, value: float | None = None) -> None:
        data = np.full(size, value, np.float32) if value is not None else (rng.standard_normal(size) * 0.02).astype(np.float32)
        writer.add_tensor(name, data)

    matrix("token_embd.weight", VOCAB, hidden)
    for layer in range(shape["layers"]):
        block = f"blk.{layer}"
        vector(f"{block}.attn_norm.weight", hidden, 1.0)
        matrix(f"{block}.attn_q.weight", hidden, hidden)
        vector(f"{block}.attn_q.bias", hidden)
        matrix(f"{block}.attn_k.weight", kv * head_dim, hidden)
        vector(f"{block}.attn_k.bias", kv * head_dim)
        matrix(f"{block}.attn_v.weight", kv * head_dim, hidden, q6)
        vector(f"{block}.attn_v.bias", kv * head_dim)
        matrix(f"{block}.attn_output.weight", hidden, hidden)
        vector(f"{block}.ffn_norm.weight", hidden, 1.0)
        matrix(f"{block}.ffn_gate.weight", inter, hidden)
        matrix(f"{block}.ffn_up.weight", inter, hidden)
        matrix(f"{block}.ffn_down.weight", hidden, inter, q6 if layer % 2 else q4)
    vector("output_norm.weight", hidden, 1.0)
    matrix("output.weight", VOCAB, hidden, q6)  # untied head
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tables = tokenizer_tables()
    target = write_model(args.out / "target.gguf", TARGET, seed=0, quantized=True, tables=tables)
    drafter = write_model(args.out / "drafter.gguf", DRAFTER, seed=1, quantized=False, tables=tables)
    for path in (target, drafter):
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
