"""Rows for EAGLE (eagle-llm's ``EaModel.eagenerate`` through :mod:`viasd_adapt.adapters.eagle`).

EAGLE loads its own copy of the target (eagle's modified Llama with a pre-allocated KV cache)
next to the head, once per bench. Its forwards are metered by hooking that copy's inner decoder
(full passes; the adapter's slim view is a shallow copy of it, so slim passes are told apart the
same way as for the HF target) and the head (draft passes). EAGLE's pre-allocated KV buffers are
added to the memory figure (not the slim verifier's own EAGLE buffer, which lives inside the
adapter's session and is not reachable after ``eagle.generate`` returns).
Limits: EAGLE stops at EOS (``eagle.generate`` trims there), so a row
may generate fewer tokens than asked; and the analytic bound is not computed (its verification
is a tree, which the block-cost model does not describe).

Rows: ``plain`` (``eagenerate`` with no viasd-adapt scope), ``none`` (inside
``eagle.tiered(mode="none")``; ``none`` vs ``plain`` is the tier-off overhead) and the tier modes.
"""

from __future__ import annotations

import torch

from viasd_adapt.bench.context import BenchContext
from viasd_adapt.bench.measure import tensor_bytes
from viasd_adapt.bench.rows import RowRunner, RowSample
from viasd_adapt.settings import Mode


def load(ctx: BenchContext):
    """The EaModel for this context (loaded and sanity-checked once)."""
    if "eagle" not in ctx.loaded:
        from viasd_adapt.adapters import eagle

        dtype = torch.float32 if ctx.device.type == "cpu" else next(ctx.target.parameters()).dtype
        kwargs = {"device_map": str(ctx.device)} if ctx.device.type == "cuda" else {}
        ctx.loaded["eagle"] = eagle.load_ea_model(ctx.target_path, ctx.eagle_head, dtype=dtype, **kwargs)
    return ctx.loaded["eagle"]


def _kv_bytes(ea_model, session_slim) -> int:
    data = getattr(ea_model, "past_key_values_data", None) or []
    total = sum(tensor_bytes(t) for t in data)
    return total + (session_slim.cache_bytes() if session_slim is not None else 0)


def make_runner(ctx: BenchContext, mode: str) -> RowRunner:
    from viasd_adapt.adapters import eagle

    ea_model = load(ctx)
    settings = ctx.settings.with_(mode=Mode.NONE if mode == "plain" else Mode.parse(mode))
    mask = ctx.mask.mask if (ctx.mask is not None and settings.mode is not Mode.NONE) else None
    sampling = ctx.sampling
    temperature = 0.0 if sampling.greedy else sampling.temperature

    def run_plain(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        """``eagenerate`` with no viasd-adapt scope at all (output trimmed like eagle.generate)."""
        torch.manual_seed(seed)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=ctx.device)
        out = ea_model.eagenerate(ids, temperature=temperature, top_p=sampling.top_p if sampling.top_p < 1.0 else 0.0,
                                  top_k=sampling.top_k, max_new_tokens=max_new_tokens)
        new = out[0, len(prompt_ids):].tolist()
        eos = ea_model.tokenizer.eos_token_id
        if eos is not None and eos in new:
            new = new[: new.index(eos) + 1]
        return RowSample(new[:max_new_tokens], None, extra_bytes=_kv_bytes(ea_model, None))

    def run(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        torch.manual_seed(seed)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=ctx.device)
        out = eagle.generate(ea_model, ids, max_new_tokens, mask=mask, settings=settings, temperature=temperature,
                             top_p=sampling.top_p, top_k=sampling.top_k)
        return RowSample(out.tokens, out.metrics, extra_bytes=_kv_bytes(ea_model, None))

    runner = run_plain if mode == "plain" else run
    runner.metered = [(ea_model.base_model.model, "full", "eagle_base"), (ea_model.ea_layer, "draft", "eagle_head")]
    return runner
