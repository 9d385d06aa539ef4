"""The three stages of a mask search, each on its own, on tiny random models from config:
calibration (prompts -> windows), search (windows + plan -> best mask and trace) and report
(trace -> typed report, artifact on disk, prose)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from tests.search.test_search_objective import prompts
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.search.calibrate import CalibrationInput, calibrate
from viasd_adapt.search.decoder_windows import WindowCache, build_windows
from viasd_adapt.search.candidates import FixedCountSpace
from viasd_adapt.search.dimr import SearchSettings, random_masks
from viasd_adapt.search.objective import AgreementProbe, MaskObjective
from viasd_adapt.search.report import ReportInput, describe, report_search
from viasd_adapt.search.run import RANDOM_SEED_OFFSET, SearchPlan, run_search
from viasd_adapt.core.settings import TierSettings

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pair():
    return tiny_model("qwen2", seed=0, num_layers=6), tiny_model("qwen2", seed=1, num_layers=1)


@pytest.fixture(scope="module")
def calibrated(pair):
    target, draft = pair
    return calibrate(target, draft, CalibrationInput(prompts(3, 3), prompts(2, 4), new_tokens=4))


@pytest.fixture(scope="module")
def plan():
    return SearchPlan(FixedCountSpace(6, 3), SearchSettings(steps=8, bo_every=3, patience=0, seed=4),
                      TierSettings(ratio=0.5), compare_random=3)


@pytest.fixture(scope="module")
def trace(pair, calibrated, plan):
    target, draft = pair
    return run_search(target, draft, calibrated, plan)


# ---------------------------------------------------------------------------- stage 1: calibration


def test_calibration_scores_the_targets_own_windows_and_builds_the_heldout_ones(pair, calibrated):
    target, _ = pair
    assert calibrated.tau == 3 * 4 and calibrated.num_windows == 3
    expected = build_windows(target, prompts(3, 3), new_tokens=4)
    assert torch.equal(calibrated.calibration.windows.input_ids, expected.input_ids)
    assert calibrated.heldout.num_scored == 2 * 4
    assert torch.equal(calibrated.heldout.input_ids, build_windows(target, prompts(2, 4), new_tokens=4).input_ids)
    assert calibrated.window_cache is None and calibrated.windows_seconds is None
    assert calibrated.seconds > 0


def test_calibration_reuses_cached_windows(pair, tmp_path):
    target, draft = pair
    inputs = CalibrationInput(prompts(2, 5), prompts(1, 6), new_tokens=3)
    cache = WindowCache(tmp_path / "w.pt")
    first = calibrate(target, draft, inputs, cache)
    assert first.window_cache["misses"] == 2 and first.window_cache["hits"] == 0
    cache.save()
    again = calibrate(target, draft, inputs, WindowCache(tmp_path / "w.pt"))
    assert again.window_cache["hits"] == 2 and again.window_cache["misses"] == 0
    assert torch.equal(again.calibration.logp_full, first.calibration.logp_full)


def test_calibration_without_heldout_prompts_has_no_heldout_windows(pair):
    target, draft = pair
    assert calibrate(target, draft, CalibrationInput(prompts(1, 0), new_tokens=2)).heldout is None


# ---------------------------------------------------------------------------- stage 2: search


def test_search_stage_finds_the_cheapest_evaluated_mask_of_the_space(pair, calibrated, plan, trace):
    target, draft = pair
    history = trace.result.history
    assert len(history) == 8 and all(e.bits.count(0) == 3 for e in history)
    assert trace.best_score.cost == pytest.approx(min(e.cost for e in history), rel=1e-5)
    objective = MaskObjective(target, calibrated.calibration, plan.tier)
    assert objective(trace.best_mask) == pytest.approx(trace.best_score.cost, rel=1e-5)
    assert trace.direct_cost == pytest.approx(objective.direct_cost, rel=1e-5)
    assert trace.num_layers == 6 and trace.fingerprint["num_layers"] == 6


def test_a_plan_scores_masks_by_its_objective_and_refuses_an_unknown_one(pair, calibrated, plan, tmp_path):
    """``objective="margin"`` end to end: the search minimises the top-1 log-margin (checked against
    a MaskObjective of that kind) and the artifact names the objective it was found with."""
    from dataclasses import replace

    target, draft = pair
    margin_plan = replace(plan, objective="margin")
    assert not margin_plan.drafter_term
    margin_trace = run_search(target, draft, calibrated, margin_plan)
    objective = MaskObjective(target, calibrated.calibration, plan.tier, objective="margin")
    assert objective(margin_trace.best_mask) == pytest.approx(margin_trace.best_score.cost, rel=1e-5)
    assert margin_trace.best_score.cost == pytest.approx(min(e.cost for e in margin_trace.result.history), rel=1e-5)
    report_search(calibrated, margin_trace, ReportInput(out=tmp_path / "mask.json", started=time.perf_counter()))
    assert "top-1 log-margin" in json.loads((tmp_path / "mask.json").read_text())["search"]["objective"]
    with pytest.raises(ConfigError, match="unknown mask objective 'kl'"):
        replace(plan, objective="kl")


def test_search_stage_scores_the_seeded_random_baseline_and_heldout_agreement(pair, calibrated, plan, trace):
    target, draft = pair
    masks = random_masks(plan.space, 3, seed=plan.settings.seed + RANDOM_SEED_OFFSET)
    assert trace.random.masks == masks
    objective = MaskObjective(target, calibrated.calibration, plan.tier)
    assert trace.random.costs == pytest.approx([objective(RoutingMask.from_bits(b)) for b in masks], rel=1e-5)
    probe = AgreementProbe(target, calibrated.heldout)
    assert trace.heldout_tau == 8
    assert trace.heldout_agreement == pytest.approx(probe.of_mask(trace.best_mask))
    assert trace.drafter_heldout_agreement == pytest.approx(probe.of_model(draft))
    assert trace.random.heldout_agreement == pytest.approx([probe.of_mask(RoutingMask.from_bits(b)) for b in masks])


def test_search_stage_refuses_a_space_for_another_model(pair, calibrated):
    target, draft = pair
    with pytest.raises(ConfigError, match="for 8 layers, the target has 6"):
        run_search(target, draft, calibrated, SearchPlan(FixedCountSpace(8, 3)))
    with pytest.raises(ConfigError, match="compare_random"):
        SearchPlan(FixedCountSpace(6, 3), compare_random=-1)


# ---------------------------------------------------------------------------- stage 3: report


def test_report_stage_types_the_trace_and_writes_the_artifact(calibrated, trace, tmp_path):
    out = tmp_path / "m.json"
    started = time.perf_counter()
    outcome = report_search(calibrated, trace, ReportInput(calibration_info={"source": "test"}, target_name="t",
                                                           draft_name="d", out=out, started=started))
    report = outcome.report
    assert outcome.artifact.mask == trace.best_mask and outcome.path == out
    assert report.report.tau == calibrated.tau and report.report.evaluations == 8
    assert report.report.random_compare.count == 3 and report.report.random_compare.seed == 4 + RANDOM_SEED_OFFSET
    assert report.report.heldout_agreement == pytest.approx(trace.heldout_agreement, abs=1e-4)
    assert report.search.seed == 4 and report.search.strategy_settings() == trace.plan.settings
    assert report.search.calibration.source == "test" and report.search.target == "t"
    assert 0 <= report.search.total_wall_seconds and outcome.total_seconds is not None
    written = json.loads(out.read_text())
    assert written["search"]["draft"] == "d" and written["report"]["version"] == 1
    assert written["search"]["total_wall_seconds"] == report.search.total_wall_seconds
    loaded = MaskArtifact.load(out)
    assert loaded.mask == trace.best_mask and loaded.score == pytest.approx(trace.best_score.cost, rel=1e-5)
    lines = describe(outcome)
    assert lines[0].startswith("DIMR: best mask skips") and "held-out greedy agreement" in lines[0]
    assert "total wall" in lines[0] and "random masks" in lines[0]


def test_report_stage_writes_nothing_without_a_path(calibrated, trace, tmp_path):
    outcome = report_search(calibrated, trace)
    assert outcome.path is None and outcome.total_seconds is None
    assert outcome.report.search.target is None and "target" not in outcome.artifact.search
    assert outcome.summary in describe(outcome)[0] and "total wall" not in describe(outcome)[0]


# ---------------------------------------------------------------------------- encoder-decoder targets


@pytest.mark.parametrize("continuation", ["target-model", "reference"])
def test_the_stages_run_an_encoder_decoder_target_on_its_sources(continuation):
    from tests.support.seq2seq import seq2seq_pair, source_for
    from viasd_adapt.search.seq2seq_windows import build_seq2seq_calibration, build_seq2seq_windows

    target, drafter, _ = seq2seq_pair("bart")
    sources = [source_for("bart", i, length=3 + i)["input_ids"][0].tolist() for i in range(5)]
    references = [[5, 6, 7], [8, 9], [10, 11, 12]]
    inputs = CalibrationInput(sources[:3], sources[3:], new_tokens=3, references=references, continuation=continuation)
    calibrated = calibrate(target, drafter, inputs)
    expected = build_seq2seq_calibration(target, drafter, sources[:3], 3, references=references, continuation=continuation)
    assert calibrated.tau == expected.tau and torch.allclose(calibrated.calibration.logp_full, expected.logp_full)
    assert calibrated.tau == (3 + 2 + 3 if continuation == "reference" else expected.tau)
    assert calibrated.heldout.num_scored == build_seq2seq_windows(target, sources[3:], 3).num_scored
    trace = run_search(target, drafter, calibrated, SearchPlan(FixedCountSpace(4, 2), SearchSettings(steps=4, bo_every=0)))
    assert trace.result.evaluations == 4 and not trace.prefix_states  # no shared-prefix states for seq2seq
    assert 0.0 <= trace.heldout_agreement <= 1.0
    outcome = report_search(calibrated, trace)
    assert outcome.report.report.heldout_tau == calibrated.heldout.num_scored
