"""From a target/drafter pair to a fingerprinted mask artifact, in three stages.

1. :func:`~viasd_adapt.search.prepare.prepare`: prompt ids -> calibration windows (cached);
2. :func:`~viasd_adapt.search.run.run_search`: windows + the config -> the best mask and the
   evaluation trace, the random baseline included;
3. :func:`~viasd_adapt.search.report.report_search`: the trace -> the mask artifact with its typed
   ``search`` and ``report`` sections (written), and the prose.

:func:`search_pair` runs them from one :class:`~viasd_adapt.search.config.SearchConfig` and a
tokenizer (what ``viasd search`` and ``viasd tune`` call); :func:`run_stages` runs them on prompt
ids already tokenized. The search strategy lives in ``dimr.py``/``guided.py``, the cost in
``objective.py``, the prompts in ``prompt_ids.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from torch import nn

from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.search import decoder_windows as cal
from viasd_adapt.search.config import DEFAULTS, SearchConfig
from viasd_adapt.search.prepare import prepare
from viasd_adapt.search.prompt_ids import PromptIds, calibration_record, prompt_ids
from viasd_adapt.search.report import ReportInput, SearchOutcome, report_search
from viasd_adapt.search.run import run_search


def prompt_lookup_stand_in(target: nn.Module) -> nn.Module:
    """The drafter a mask search scores against for prompt lookup: prompt lookup proposes copied
    tokens and has no distribution, so the target's first decoder layer and head stand in for a
    cheap drafter's view of the text."""
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.routing.slim import SlimVerifier

    layers = find_decoder_stack(target).num_layers
    return SlimVerifier(target, RoutingMask.from_bits([1] + [0] * (layers - 1))).model


def run_stages(target: nn.Module, draft: nn.Module, ids: PromptIds, config: SearchConfig = DEFAULTS,
               info: ReportInput = ReportInput(), window_cache: cal.WindowCache | None = None,
               on_step: Callable | None = None) -> SearchOutcome:
    """Prepare, search, report. Every input error (a ratio that leaves no mask for this target, a
    drafter over another vocabulary) is raised before the first forward."""
    config.mask_space(find_decoder_stack(target).num_layers)  # prepare() checks the vocabularies first thing
    prepared = prepare(target, draft, ids, config, window_cache)
    trace = run_search(target, draft, prepared, config, on_step)
    return report_search(prepared, trace, info)


def search_pair(target: nn.Module, draft: nn.Module, tokenizer, config: SearchConfig = DEFAULTS, *,
                prompt_lookup: bool = False, window_cache: cal.WindowCache | None = None,
                on_step: Callable | None = None, info: ReportInput = ReportInput(),
                say: Callable[[str], None] | None = None) -> SearchOutcome:
    """One search of ``config`` on a loaded pair: its prompts (``config.calibration``) through
    ``tokenizer``, its space for this target, its strategy; ``info`` names the models and where
    the artifact goes. ``prompt_lookup``: the drafter stands in for a prompt-lookup drafter (no
    distribution of its own; the artifact records how it was stood in for)."""
    stack = find_decoder_stack(target)
    config.mask_space(stack.num_layers)  # a ratio that leaves no mask fails before the prompts are read
    ids = prompt_ids(tokenizer, config, stack.encoder_decoder)
    if say is not None:
        say(f"calibrating: {len(ids.calib_ids)} prompts x {config.calibration.new_tokens} greedy tokens of the "
            "target ...")
    if info.calibration_info is None:
        record = calibration_record(tokenizer, config, prompt_lookup, stack.encoder_decoder)
        info = replace(info, calibration_info=record)
    return run_stages(target, draft, ids, config, info, window_cache, on_step)


__all__ = ["SearchOutcome", "search_pair"]
