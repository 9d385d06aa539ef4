"""From a target/drafter pair to a fingerprinted mask artifact: calibrate, search, compare, report.

Model plumbing only; the search strategy lives in ``dimr.py`` and the cost in ``objective.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, model_fingerprint, skip_count
from viasd_adapt.search import calibration as cal
from viasd_adapt.search.bo import BOSettings
from viasd_adapt.search.candidates import FixedCountSpace, MaskSpace, first_skipped, marginal_layers
from viasd_adapt.search.dimr import SearchResult, SearchSettings, check_cardinality, dimr_search, median, random_masks
from viasd_adapt.search.objective import AgreementProbe, MaskObjective
from viasd_adapt.settings import TierSettings


@dataclass(frozen=True)
class CalibrationSpec:
    """Where calibration and held-out prompts come from and how long the windows are."""

    calib_file: Path | None = None
    n_calibration: int = cal.DEFAULT_CALIB_PROMPTS
    n_heldout: int = cal.DEFAULT_HELDOUT_PROMPTS
    new_tokens: int = cal.DEFAULT_NEW_TOKENS
    max_prompt_tokens: int = cal.DEFAULT_PROMPT_TOKENS
    prompt_seed: int = 0

    def to_dict(self) -> dict:
        return {
            "calib_file": str(self.calib_file) if self.calib_file else None,
            "source": "file" if self.calib_file else "stdlib held-out corpus (viasd_adapt.models.corpus)",
            "n_calibration": self.n_calibration,
            "n_heldout": self.n_heldout,
            "new_tokens": self.new_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "prompt_seed": self.prompt_seed,
        }


def uses_spec_bench(tokenizer, spec: CalibrationSpec) -> bool:
    """Spec-Bench calibration questions when ``--calib spec-bench[:tasks]`` names them, or by default
    for a target with a chat template (the stdlib snippets are prompts for the code demo pairs)."""
    from viasd_adapt.chat import has_chat_template
    from viasd_adapt.spec_bench import is_spec_bench

    if spec.calib_file is not None:
        return is_spec_bench(str(spec.calib_file))
    return has_chat_template(tokenizer)


def chat_prompt_ids(tokenizer, text: str, max_tokens: int) -> list[int]:
    """A user turn through the chat template, at most ``max_tokens`` ids: a long question is cut
    (its text, not the template), so the generation prompt that makes the target answer survives."""
    from viasd_adapt.chat import encode_prompt

    ids = encode_prompt(tokenizer, text)
    if len(ids) <= max_tokens:
        return ids
    text_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    overhead = len(ids) - len(text_ids)
    if overhead >= max_tokens:
        return ids[-max_tokens:]
    ids = encode_prompt(tokenizer, tokenizer.decode(text_ids[: max_tokens - overhead]))
    return ids[-max_tokens:] if len(ids) > max_tokens else ids


def spec_bench_texts(spec: CalibrationSpec) -> tuple[list[str], list[str]]:
    """First turns of Spec-Bench *calibration-split* questions (``viasd bench`` never reads them):
    ``n_calibration`` for the search and the next ``n_heldout`` for the agreement report, taken
    round-robin over the tasks so both sets cover every task."""
    from viasd_adapt import spec_bench

    selector = str(spec.calib_file) if spec.calib_file is not None else spec_bench.PREFIX
    questions = spec_bench.select(selector, split="calibration")
    tasks = list(dict.fromkeys(q.task for q in questions))
    columns = [[q for q in questions if q.task == t] for t in tasks]
    order = [column[row] for row in range(max(map(len, columns), default=0)) for column in columns if row < len(column)]
    if len(order) < spec.n_calibration + spec.n_heldout:
        raise ConfigError(f"{selector} has {len(order)} calibration questions; {spec.n_calibration} + {spec.n_heldout} requested")
    chosen = order[: spec.n_calibration + spec.n_heldout]
    texts = [q.turns[0] for q in chosen]
    return texts[: spec.n_calibration], texts[spec.n_calibration :]


def prompt_token_ids(tokenizer, spec: CalibrationSpec) -> tuple[list[list[int]], list[list[int]]]:
    """(calibration, held-out) token ids. With a calibration file, held-out prompts still come from
    the corpus, so agreement is always measured on text the search never saw. Chat targets (and
    ``--calib spec-bench``) use Spec-Bench calibration questions through the chat template."""
    if uses_spec_bench(tokenizer, spec):
        calib_text, heldout_text = spec_bench_texts(spec)
        return ([chat_prompt_ids(tokenizer, t, spec.max_prompt_tokens) for t in calib_text],
                [chat_prompt_ids(tokenizer, t, spec.max_prompt_tokens) for t in heldout_text])
    if spec.calib_file is not None:
        calib_text = cal.load_prompt_file(spec.calib_file)
        _, heldout_text = cal.default_prompts(0, spec.n_heldout, seed=spec.prompt_seed)
    else:
        calib_text, heldout_text = cal.default_prompts(spec.n_calibration, spec.n_heldout, seed=spec.prompt_seed)
    return (cal.encode_prompts(tokenizer, calib_text, spec.max_prompt_tokens),
            cal.encode_prompts(tokenizer, heldout_text, spec.max_prompt_tokens))


@dataclass
class SearchOutcome:
    artifact: MaskArtifact
    result: SearchResult
    random_costs: list[float] = field(default_factory=list)
    summary: str = ""


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def mask_price(mask: RoutingMask) -> dict:
    """What a mask costs in decoder layers, with the target resuming at its first skipped layer.

    ``slim_layers``: layers the slim pass runs; ``resume_layers``: layers a resumed target pass
    runs (from s1 on); ``marginal_layers``: the slim pass's layers the target cannot reuse (its
    retained layers at or after s1). Fractions are of the target's layer count.
    """
    bits = tuple(mask.bits())
    L = mask.num_layers
    s1 = first_skipped(bits)
    slim = len(mask.retained)
    marginal = marginal_layers(bits)
    return {"s1": s1, "slim_layers": slim, "resume_layers": L - s1, "marginal_layers": marginal,
            "slim_fraction": round(slim / L, 4), "resume_fraction": round((L - s1) / L, 4),
            "marginal_fraction": round(marginal / L, 4)}


def cycle_price(mask: RoutingMask, escalation: float | None) -> float | None:
    """Expected verification cost of one cycle, as a fraction of a full target pass: the slim pass
    (its retained layers) plus, on the share ``escalation`` of cycles that call q, q resumed at s1
    (layers s1..L-1). See :meth:`~viasd_adapt.search.candidates.BudgetSpace.cycle_price`."""
    if escalation is None:
        return None
    price = mask_price(mask)
    return (price["slim_layers"] + escalation * price["resume_layers"]) / mask.num_layers


def search_mask(
    target: nn.Module,
    draft: nn.Module,
    calib_ids: Sequence[Sequence[int]],
    heldout_ids: Sequence[Sequence[int]] = (),
    ratio: float = 0.45,
    settings: SearchSettings = SearchSettings(),
    tier: TierSettings | None = None,
    compare_random: int = 0,
    new_tokens: int = cal.DEFAULT_NEW_TOKENS,
    pad_id: int = 0,
    bo_settings: BOSettings = BOSettings(),
    on_step: Callable | None = None,
    calibration_info: dict | None = None,
    space: MaskSpace | None = None,
    calib_references: Sequence[Sequence[int]] | None = None,
    continuation: str = "target-model",
    window_cache: "cal.WindowCache | None" = None,
    drafter_term: bool = True,
) -> SearchOutcome:
    """Calibrate once, run DIMR, score the random baseline, and build the artifact.

    ``space`` defaults to the paper's: exactly ``round(ratio * L)`` skipped layers. ``settings`` is a
    :class:`SearchSettings` (random + BO every theta steps) or a
    :class:`~viasd_adapt.search.guided.GuidedSettings` (probes, warm starts, swap trust region, GP).
    ``window_cache`` keeps the target's greedy windows between runs (decoder-only targets).
    Bad inputs fail before any model runs: mismatched vocabularies (:class:`ModelMismatchError`), a ratio outside
    (0, 1) or one that skips no layer or every layer (:class:`ConfigError`).
    """
    tier = tier or TierSettings(ratio=ratio)
    num_layers = find_decoder_stack(target).num_layers
    if space is None:
        k = skip_count(num_layers, ratio)
        check_cardinality(num_layers, k)
        space = FixedCountSpace(num_layers, k)
    elif space.num_layers != num_layers:
        raise ConfigError(f"the search space is for {space.num_layers} layers, the target has {num_layers}")
    cal.check_compatible(target, draft)
    started = time.perf_counter()

    encoder_decoder = find_decoder_stack(target).encoder_decoder
    if encoder_decoder:  # calib_ids / heldout_ids are SOURCES; decoder windows come from the target
        from viasd_adapt.seq2seq_calibration import build_seq2seq_calibration, build_seq2seq_windows

        calibration = build_seq2seq_calibration(target, draft, calib_ids, new_tokens, references=calib_references,
                                                continuation=continuation, pad_id=pad_id)
    else:
        windows = window_cache.windows(target, calib_ids, new_tokens, pad_id) if window_cache is not None else None
        calibration = cal.build_calibration(target, draft, calib_ids, new_tokens, pad_id, windows=windows)
    windows_seconds = window_cache.generate_seconds if window_cache is not None else None
    objective = MaskObjective(target, calibration, tier, drafter_term=drafter_term)
    calibration_seconds = time.perf_counter() - started

    def cost(bits) -> float:
        return objective(RoutingMask.from_bits(bits))

    from viasd_adapt.search.guided import GuidedSettings, guided_search

    if isinstance(settings, GuidedSettings):
        result = guided_search(cost, space, settings, on_step)
    else:
        result = dimr_search(cost, space, settings, bo_settings, on_step)
    search_eval_seconds = objective.seconds
    best_mask = RoutingMask.from_bits(result.best.bits)
    best_score = objective.score(best_mask)

    report: dict = {
        "tau": calibration.tau,
        "calibration_windows": int(calibration.windows.input_ids.size(0)),
        "num_layers": num_layers,
        "skipped_count": best_mask.num_skipped,
        "space": space.describe(),
        "price": mask_price(best_mask),
        "cost_per_token": _rounded(best_score.per_token(calibration.tau), 6),
        "direct_cost_alpha2": _rounded(objective.direct_cost),
        "calib_agreement": _rounded(best_score.agreement),
        "evaluations": result.evaluations,
        "bo_evaluations": sum(1 for e in result.history if e.kind == "bo"),
        "stop_reason": result.stop_reason,
        "bo_failures": result.extras.get("bo_failures", []),
        "calibration_seconds": round(calibration_seconds, 2),
        "search_seconds": round(result.wall_seconds, 2),
        "bo_seconds": round(result.bo_seconds, 2),
        "escalation_estimate": _rounded(best_score.escalation),
        "cycle_price": _rounded(cycle_price(best_mask, best_score.escalation)),
        "time": {
            "calibration_windows_generated": None if windows_seconds is None else round(windows_seconds, 2),
            "calibration_total": round(calibration_seconds, 2),
            "window_cache": window_cache.report() if window_cache is not None else None,
            "evaluations": round(search_eval_seconds, 2),
            "evaluation_mean": round(search_eval_seconds / max(1, result.evaluations), 3),
            "gp_fit": round(float(result.extras.get("gp_fit_seconds", result.bo_seconds)), 2),
            "proposals": round(float(result.extras.get("phase_seconds", {}).get("proposal", result.bo_seconds)), 2),
            "prefix_states": objective.prefix is not None,
        },
        "probe_evaluations": result.extras.get("probe_evaluations", 0),
        "layer_sensitivity": ([_rounded(v) for v in result.extras["sensitivity"]]
                              if result.extras.get("sensitivity") else None),
        "history": [[e.step, e.kind, round(e.cost, 5)] for e in result.history],
        "costs_exact": "calibration is fixed and forwards are deterministic, so the observed minimum is exact; no re-evaluation",
    }
    build_probe_windows = build_seq2seq_windows if encoder_decoder else cal.build_windows
    if window_cache is not None and not encoder_decoder:
        build_probe_windows = window_cache.windows
    probe = AgreementProbe(target, build_probe_windows(target, heldout_ids, new_tokens, pad_id=pad_id)) if heldout_ids else None
    if window_cache is not None:
        report["time"]["window_cache"] = window_cache.report()
    if probe is not None:
        report["heldout_tau"] = probe.windows.num_scored
        report["heldout_agreement"] = _rounded(probe.of_mask(best_mask))
        report["drafter_heldout_agreement"] = _rounded(probe.of_model(draft))

    random_costs: list[float] = []
    if compare_random:
        masks = random_masks(space, compare_random, seed=settings.seed + 7919)
        scores = [objective.score(RoutingMask.from_bits(b)) for b in masks]
        random_costs = [s.cost for s in scores]
        entry = {
            "count": compare_random,
            "seed": settings.seed + 7919,
            "skipped_layers": [[i for i, b in enumerate(bits) if b == 0] for bits in masks],
            "costs": [_rounded(c) for c in random_costs],
            "median_cost": _rounded(median(random_costs)),
            "dimr_cost_ratio_to_median": _rounded(median(random_costs) / best_score.cost, 3) if best_score.cost > 0 else None,
            "calib_agreement": [_rounded(s.agreement) for s in scores],
            "deltas": [_rounded(s.delta) for s in scores],
        }
        if probe is not None:
            agreements = [probe.of_mask(RoutingMask.from_bits(b)) for b in masks]
            entry["heldout_agreement"] = [_rounded(a) for a in agreements]
            entry["median_heldout_agreement"] = _rounded(median(agreements))
        report["random_compare"] = entry

    search_info = settings.to_dict() | {
        "ratio": best_mask.ratio,
        "space": space.describe(),
        "alpha1": tier.alpha1,
        "alpha2": tier.alpha2,
        "beta": tier.beta,
        "objective": ("C_alpha1(u||p) + C_alpha2(q||u), relu margins, summed over tau continuation positions" if drafter_term
                      else "C_alpha2(q||u) only (the drafter has no distribution), relu margins, summed over tau continuation positions"),
        "delta_reading": "C_alpha2(q||p) - [C_alpha1(u||p) + C_alpha2(q||u)]",
        "strategy": ("guided: " + settings.label() + " (per-layer probes, structured warm starts, swap trust region, "
                     "additive surrogate + SingleTaskGP lower confidence bound)") if isinstance(settings, GuidedSettings)
                    else "random masks of the space + SingleTaskGP/qLogNEI over a flip/swap-neighbour pool every bo_every steps",
        "bo": bo_settings.__dict__,
        "calibration": calibration_info or {},
        "wall_seconds": round(time.perf_counter() - started, 2),
        "torch_threads": torch.get_num_threads(),
    }
    artifact = MaskArtifact(
        mask=best_mask,
        ratio=best_mask.ratio,
        score=round(best_score.cost, 6),
        delta=round(best_score.delta, 6),
        search=search_info,
        fingerprint=model_fingerprint(target),
        report=report,
    )
    price = mask_price(best_mask)
    summary = (
        f"DIMR: best mask skips {list(best_mask.skipped)} of {num_layers} layers "
        f"(s1 = {price['s1']}: slim pass {price['slim_layers']} layers, resumed target pass {price['resume_layers']}); "
        f"cost {best_score.cost:.3f} ({best_score.per_token(calibration.tau):.4f}/token), Delta {best_score.delta:+.3f}; "
        + (f"{result.evaluations} evaluations ({report['probe_evaluations']} probes, {settings.label()}) "
           if isinstance(settings, GuidedSettings) else f"{result.evaluations} evaluations ({report['bo_evaluations']} BO) ")
        + f"in {search_info['wall_seconds']:.1f}s; time: calibration {calibration_seconds:.1f}s"
        + (f" (windows {'cached' if window_cache.hits and not window_cache.misses else f'generated {windows_seconds:.1f}s'})"
           if window_cache is not None else "")
        + f", evaluations {search_eval_seconds:.1f}s, GP fits {report['time']['gp_fit']:.1f}s"
    )
    if random_costs:
        summary += f"; median of {len(random_costs)} random masks {median(random_costs):.3f}"
    return SearchOutcome(artifact, result, random_costs, summary)
