"""The three stages of a mask search, each on its own, on tiny random models from config:
preparation (prompt ids -> windows), search (windows + config -> best mask and trace) and report
(trace -> artifact with typed sections, on disk, prose)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from tests.search.test_search_objective import prompts
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.search.config import RANDOM_SEED_OFFSET, CalibrationConfig, SearchConfig
from viasd_adapt.search.decoder_windows import WindowCache, build_windows
from viasd_adapt.search.candidates import FixedCountSpace
from viasd_adapt.search.dimr import random_masks
from viasd_adapt.search.objective import AgreementProbe, MaskObjective
from viasd_adapt.search.prepare import prepare
from viasd_adapt.search.prompt_ids import PromptIds
from viasd_adapt.search.report import ReportInput, describe, report_search
from viasd_adapt.search.run import run_search


@pytest.fixture(scope="module")
def pair():
    return tiny_model("qwen2", seed=0, num_layers=6), tiny_model("qwen2", seed=1, num_layers=1)


def windows_of(new_tokens: int, **calibration) -> SearchConfig:
    """A config whose windows are ``new_tokens`` long (the only part of it stage 1 reads)."""
    return SearchConfig(calibration=CalibrationConfig(new_tokens=new_tokens, **calibration))


@pytest.fixture(scope="module")
def calibrated(pair):
    target, draft = pair
    return prepare(target, draft, PromptIds(prompts(3, 3), prompts(2, 4)), windows_of(4))


@pytest.fixture(scope="module")
def config():
    """DIMR with the paper's routed cost on exactly 3 of the 6 layers."""
    return SearchConfig(ratio=0.5, strategy="dimr", steps=8, bo_every=3, patience=0, seed=4, objective="routed",
                        compare_random=3)


@pytest.fixture(scope="module")
def trace(pair, calibrated, config):
    target, draft = pair
    return run_search(target, draft, calibrated, config)


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
    ids = PromptIds(prompts(2, 5), prompts(1, 6))
    cache = WindowCache(tmp_path / "w.pt")
    first = prepare(target, draft, ids, windows_of(3), cache)
    assert first.window_cache["misses"] == 2 and first.window_cache["hits"] == 0
    cache.save()
    again = prepare(target, draft, ids, windows_of(3), WindowCache(tmp_path / "w.pt"))
    assert again.window_cache["hits"] == 2 and again.window_cache["misses"] == 0
    assert torch.equal(again.calibration.logp_full, first.calibration.logp_full)


def test_calibration_without_heldout_prompts_has_no_heldout_windows(pair):
    target, draft = pair
    assert prepare(target, draft, PromptIds(prompts(1, 0), []), windows_of(2)).heldout is None


# ---------------------------------------------------------------------------- stage 2: search


def test_search_stage_finds_the_cheapest_evaluated_mask_of_the_space(pair, calibrated, config, trace):
    target, draft = pair
    history = trace.result.history
    assert len(history) == 8 and all(e.bits.count(0) == 3 for e in history)
    assert trace.space.describe() == FixedCountSpace(6, 3).describe() and trace.objective == "routed"
    assert trace.best_score.cost == pytest.approx(min(e.cost for e in history), rel=1e-5)
    objective = MaskObjective(target, calibrated.calibration, config.tier())
    assert objective(trace.best_mask) == pytest.approx(trace.best_score.cost, rel=1e-5)
    assert trace.direct_cost == pytest.approx(objective.direct_cost, rel=1e-5)
    assert trace.num_layers == 6 and trace.fingerprint["num_layers"] == 6


def test_a_config_scores_masks_by_its_objective_and_refuses_an_unknown_one(pair, calibrated, config, tmp_path):
    """``objective="margin"`` end to end: the search minimises the top-1 log-margin (checked against
    a MaskObjective of that kind) and the artifact names the objective it was found with."""
    target, draft = pair
    margin_config = config.with_(objective="margin")
    assert not margin_config.drafter_term and config.drafter_term
    margin_trace = run_search(target, draft, calibrated, margin_config)
    objective = MaskObjective(target, calibrated.calibration, config.tier(), objective="margin")
    assert objective(margin_trace.best_mask) == pytest.approx(margin_trace.best_score.cost, rel=1e-5)
    assert margin_trace.best_score.cost == pytest.approx(min(e.cost for e in margin_trace.result.history), rel=1e-5)
    report_search(calibrated, margin_trace, ReportInput(out=tmp_path / "mask.json", started=time.perf_counter()))
    assert "top-1 log-margin" in json.loads((tmp_path / "mask.json").read_text())["search"]["objective"]
    with pytest.raises(ConfigError, match=r"objective must be one of .*got 'kl'"):
        config.with_(objective="kl")


def test_search_stage_scores_the_seeded_random_baseline_and_heldout_agreement(pair, calibrated, config, trace):
    target, draft = pair
    masks = random_masks(FixedCountSpace(6, 3), 3, seed=config.seed + RANDOM_SEED_OFFSET)
    assert trace.random.masks == masks
    objective = MaskObjective(target, calibrated.calibration, config.tier())
    assert trace.random.costs == pytest.approx([objective(RoutingMask.from_bits(b)) for b in masks], rel=1e-5)
    probe = AgreementProbe(target, calibrated.heldout)
    assert trace.heldout_tau == 8
    assert trace.heldout_agreement == pytest.approx(probe.of_mask(trace.best_mask))
    assert trace.drafter_heldout_agreement == pytest.approx(probe.of_model(draft))
    assert trace.random.heldout_agreement == pytest.approx([probe.of_mask(RoutingMask.from_bits(b)) for b in masks])


def test_search_stage_searches_the_space_of_its_target_and_refuses_one_without_masks(pair, calibrated, config):
    """The space is the config's for the target searched (its layer count), never one built for
    another model; a ratio that leaves no mask on this target is refused before any forward."""
    target, draft = pair
    forwards = []
    handle = target.register_forward_hook(lambda *args: forwards.append(1))
    try:
        with pytest.raises(ConfigError, match="at least one layer must remain"):
            run_search(target, draft, calibrated, config.with_(ratio=0.95))  # round(5.7) = 6 of 6 layers
    finally:
        handle.remove()
    assert not forwards
    budget = config.with_(space="budget", price="marginal", slim_cost=0.5, steps=4, compare_random=0)
    assert run_search(target, draft, calibrated, budget).space.describe()["num_layers"] == 6
    with pytest.raises(ConfigError, match="compare_random must be >= 0"):
        config.with_(compare_random=-1)


# ---------------------------------------------------------------------------- stage 3: report


def test_report_stage_types_the_trace_and_writes_the_artifact(calibrated, trace, tmp_path):
    out = tmp_path / "m.json"
    started = time.perf_counter()
    outcome = report_search(calibrated, trace, ReportInput(calibration_info={"source": "test"}, target_name="t",
                                                           draft_name="d", out=out, started=started))
    search, report = outcome.artifact.search, outcome.artifact.report
    assert outcome.search is search and outcome.report is report
    assert outcome.artifact.mask == trace.best_mask and outcome.path == out
    assert report.tau == calibrated.tau and report.evaluations == 8
    assert report.random_compare.count == 3 and report.random_compare.seed == 4 + RANDOM_SEED_OFFSET
    assert report.heldout_agreement == pytest.approx(trace.heldout_agreement, abs=1e-4)
    assert search.model_dump(include=set(trace.config.strategy_record())) == trace.config.strategy_record()
    assert (search.seed, search.steps, search.bo_every, search.patience) == (4, 8, 3, 0)
    assert search.calibration.source == "test" and search.target == "t"
    assert 0 <= search.total_wall_seconds and outcome.total_seconds is not None
    written = json.loads(out.read_text())
    assert written["search"]["draft"] == "d" and written["report"]["version"] == 1
    assert written["search"]["total_wall_seconds"] == search.total_wall_seconds
    loaded = MaskArtifact.load(out)
    assert loaded.mask == trace.best_mask and loaded.score == pytest.approx(trace.best_score.cost, rel=1e-5)
    assert loaded.search == search and loaded.report == report  # the typed sections, read back
    lines = describe(outcome)
    assert lines[0].startswith("DIMR: best mask skips") and "held-out greedy agreement" in lines[0]
    assert "total wall" in lines[0] and "random masks" in lines[0]


def test_report_stage_writes_nothing_without_a_path(calibrated, trace, tmp_path):
    outcome = report_search(calibrated, trace)
    assert outcome.path is None and outcome.total_seconds is None
    assert outcome.search.target is None and "target" not in outcome.artifact.to_json()["search"]
    assert outcome.summary in describe(outcome)[0] and "total wall" not in describe(outcome)[0]


# ---------------------------------------------------------------------------- encoder-decoder targets


@pytest.mark.parametrize("continuation", ["target-model", "reference"])
def test_the_stages_run_an_encoder_decoder_target_on_its_sources(continuation):
    from tests.support.seq2seq import seq2seq_pair, source_for
    from viasd_adapt.search.seq2seq_windows import build_seq2seq_calibration, build_seq2seq_windows

    target, drafter, _ = seq2seq_pair("bart")
    sources = [source_for("bart", i, length=3 + i)["input_ids"][0].tolist() for i in range(5)]
    references = [[5, 6, 7], [8, 9], [10, 11, 12]]
    config = windows_of(3, continuation=continuation).with_(strategy="dimr", ratio=0.5, steps=4, bo_every=0,
                                                            objective="routed")
    calibrated = prepare(target, drafter, PromptIds(sources[:3], sources[3:], references), config)
    expected = build_seq2seq_calibration(target, drafter, sources[:3], 3, references=references, continuation=continuation)
    assert calibrated.tau == expected.tau and torch.allclose(calibrated.calibration.logp_full, expected.logp_full)
    assert calibrated.tau == (3 + 2 + 3 if continuation == "reference" else expected.tau)
    assert calibrated.heldout.num_scored == build_seq2seq_windows(target, sources[3:], 3).num_scored
    trace = run_search(target, drafter, calibrated, config)
    assert trace.space.describe() == FixedCountSpace(4, 2).describe()
    assert trace.result.evaluations == 4 and not trace.prefix_states  # no shared-prefix states for seq2seq
    assert 0.0 <= trace.heldout_agreement <= 1.0
    outcome = report_search(calibrated, trace)
    assert outcome.report.heldout_tau == calibrated.heldout.num_scored
