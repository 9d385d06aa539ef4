"""Rows for PEARL (:func:`viasd_adapt.adapters.pearl.pearl_generate`), parallel mode.

PEARL drafts while the target verifies (two threads, one intra-op thread each), so its analytic
bound uses ``max(drafting, verifying)`` per token rather than their sum.
"""

from __future__ import annotations

from viasd_adapt.bench.context import BenchContext
from viasd_adapt.bench.rows import RowRunner, RowSample
from viasd_adapt.settings import Mode

PARALLEL = True


def make_runner(ctx: BenchContext, mode: str) -> RowRunner:
    from viasd_adapt.adapters.pearl import pearl_generate

    settings = ctx.settings.with_(mode=Mode.parse(mode))
    mask = ctx.mask.mask if (ctx.mask is not None and settings.mode is not Mode.NONE) else None

    def run(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        out = pearl_generate(
            ctx.target, ctx.draft, prompt_ids, max_new_tokens, settings=settings, mask=mask,
            sampling=ctx.sampling, parallel=PARALLEL, seed=seed, eos_token_id=None,
        )
        return RowSample(out.tokens, out.metrics)

    return run
