"""Shared plumbing of the GPU checks (``gpu_check.sh``): the shipped demo pair on a device, in a
dtype, with its held-out prompts. Imported by ``cuda_lossless_check.py`` and ``pearl_profile.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viasd_adapt.training.corpus import heldout_prompts  # noqa: E402
from viasd_adapt.models.registry import demo_pair_paths  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def load_demo(dtype: torch.dtype, device: torch.device, device_map: bool = False):
    """``(pair paths, tokenizer, target, drafter)`` of the shipped demo pair, eval mode.

    ``device_map=True`` loads through accelerate's ``device_map`` (as the bench does on CUDA);
    otherwise the models are loaded on the CPU and moved.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pair = demo_pair_paths()
    tokenizer = AutoTokenizer.from_pretrained(str(pair.target))
    kwargs = {"device_map": str(device)} if device_map else {}
    models = []
    for path in (pair.target, pair.draft):
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **kwargs)
        models.append((model if device_map else model.to(device)).eval())
    return pair, tokenizer, models[0], models[1]


def demo_prompts(tokenizer, n: int, max_tokens: int = 64, seed: int = 0) -> list[list[int]]:
    """``n`` held-out stdlib snippets as token ids (the last ``max_tokens`` of each)."""
    return [tokenizer(text)["input_ids"][-max_tokens:] for text in heldout_prompts(n, seed=seed)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment() -> dict:
    import os
    import platform

    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda_available": torch.cuda.is_available(),
        "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "(unset: lazy by default since CUDA 12.2)"),
    }
    if torch.cuda.is_available():
        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                   fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
        try:
            env["preferred_blas"] = str(torch.backends.cuda.preferred_blas_library())
        except Exception as err:  # older torch
            env["preferred_blas"] = f"unknown ({err})"
    return env
