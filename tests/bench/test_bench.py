"""``viasd bench``: rows, fields, medians, pass counting, costs, fidelity, the verdict, JSON and plot.

The pair is the char pair of :mod:`tests.support.pairs` (random and tiny, built from configs in
milliseconds, with a character-level tokenizer saved beside it), so the bench runs end to end
through ``from_pretrained`` paths in seconds. The drafter holds the target's first layer and head
so that it agrees with the target part of the time, and the head is sharpened so that
distributions are peaked, not flat.
"""

from __future__ import annotations

import json
import statistics

import pytest
import torch
from click.testing import CliRunner

from tests.support.pairs import CHAR_LAYERS, CHAR_PROMPTS, CHAR_VOCAB, char_mask, char_pair_models, char_tokenizer
from viasd_adapt.config.budget import Budget, tier_beats
from viasd_adapt.bench.verdict import verdict
from viasd_adapt.bench.costs import ForwardCosts, PassCounts, analytic_bound, full_equivalent
from viasd_adapt.bench.fidelity import next_line, next_line_match, positional_agreement, score_output
from viasd_adapt.bench.measure import RunMeter
from viasd_adapt.bench.projection import load_cost_model, project_rows
from viasd_adapt.bench.report import BenchReport, plot_rows
from viasd_adapt.bench.run import ROW_FIELDS, RunPlan, run_bench
from viasd_adapt.bench.session import projection_report, result_lines
from viasd_adapt.cli.main import cli
from viasd_adapt.models.pair import LoadedPair, MaskInfo, fallback_mask, load_pair, resolve_mask_info
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.routing.runner import CachedRunner
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


PROMPTS = CHAR_PROMPTS
LAYERS = CHAR_LAYERS
MODES = ("none", "lenient", "lossless", "lossy", "audit")
#: the rows each framework runs: the modes, lossless and lossy (adaptive) each followed by its fixed twin
ROWS = ("none", "lenient", "lossless", "lossless-fixed", "lossy", "lossy-fixed", "audit")
TASK = [("def add(a, b):", "    return a + b"), ("for i in range(10):", "    print(i)")]


@pytest.fixture(scope="module")
def pair():
    target, draft = char_pair_models()
    return LoadedPair(target, draft, char_tokenizer(), MaskInfo(char_mask(), "test", False), torch.device("cpu"))


@pytest.fixture(scope="module")
def result(pair):
    plan = RunPlan(frameworks=("hf", "pearl"), modes=MODES, max_new_tokens=10, repeats=3, cost_repeats=2, task_tokens=8)
    return run_bench(pair, TierSettings(gamma=3, lenience=0.5), SamplingConfig(), PROMPTS, plan, TASK)


def _row(rows, framework, mode):
    matches = [r for r in rows if r["framework"] == framework and r["mode"] == mode]
    assert len(matches) == 1, (framework, mode, [(r["framework"], r["mode"]) for r in rows])
    return matches[0]


# ---------------------------------------------------------------------------- the bench run


def test_every_row_is_present_with_every_field(result):
    keys = [(r["framework"], r["mode"]) for r in result.rows]
    expected = [("ar", "-"), ("hf", "plain")] + [(fw, m) for fw in ("hf", "pearl") for m in ROWS]
    assert keys == expected
    for row in result.rows:
        assert set(ROW_FIELDS) <= set(row)
        assert row["tokens_per_s"] > 0
        assert len(row["repeats"]["tokens_per_s"]) == 3
        assert row["repeats"]["tokens"] == [2 * 10] * 3  # EOS never stops a bench generation


def test_reported_values_are_medians_of_the_repeats(result):
    for row in result.rows:
        assert row["tokens_per_s"] == pytest.approx(statistics.median(row["repeats"]["tokens_per_s"]))
    ar = _row(result.rows, "ar", "-")
    hf_none = _row(result.rows, "hf", "none")
    ratios = [a / b for a, b in zip(hf_none["repeats"]["tokens_per_s"], ar["repeats"]["tokens_per_s"])]
    assert hf_none["speedup_vs_ar"] == pytest.approx(statistics.median(ratios))  # paired within each repeat
    assert all(len(per_prompt) == len(PROMPTS) for per_prompt in hf_none["repeats"]["per_prompt_tokens_per_s"])
    assert ar["speedup_vs_ar"] == pytest.approx(1.0)
    assert hf_none["speedup_vs_untiered"] == pytest.approx(1.0)


def test_exact_rows_reproduce_the_targets_greedy_output_and_likelihood(result):
    ar = _row(result.rows, "ar", "-")
    for framework, mode in [("hf", "plain"), ("hf", "none"), ("hf", "lossless"), ("pearl", "none"), ("pearl", "lossless"),
                            ("hf", "lossless-fixed"), ("pearl", "lossless-fixed")]:
        row = _row(result.rows, framework, mode)
        assert row["greedy_agreement"] == 1.0 and row["target_argmax_agreement"] == 1.0, (framework, mode)
        assert row["ll_drop"] == pytest.approx(0.0, abs=1e-6) and row["target_ll"] == pytest.approx(ar["target_ll"])
        assert row["next_line_match"] in (None, ar["next_line_match"])


def test_pass_counts_and_full_equivalents_reflect_what_each_row_ran(result):
    ar = _row(result.rows, "ar", "-")
    assert ar["full_passes_per_token"] == pytest.approx(1.0)  # one prefill + one forward per later token
    assert ar["slim_passes_per_token"] == 0 and ar["draft_passes_per_token"] == 0
    assert ar["rejection_rate"] is None
    c = result.costs
    # each pass priced by what it fed: the prefill (the prompt) is a block pass, every later step a one-token pass
    n = 10
    assert ar["single_passes_per_token"] == pytest.approx((n - 1) / n)
    assert ar["full_equivalent_per_token"] == pytest.approx(((n - 1) * c.c_full + c.c_full_block) / (n * c.c_full_block))
    for fw in ("hf", "pearl"):
        for mode in ("none", "lenient"):
            assert _row(result.rows, fw, mode)["slim_passes_per_token"] == 0
            assert _row(result.rows, fw, mode)["draft_passes_per_token"] > 0
        for mode in ("lossless-fixed", "lossy-fixed", "audit"):  # the tier on every cycle
            assert _row(result.rows, fw, mode)["slim_passes_per_token"] > 0
        # audit runs q in shadow every cycle, lossy only on escalation
        assert _row(result.rows, fw, "audit")["full_passes_per_token"] >= _row(result.rows, fw, "lossy-fixed")["full_passes_per_token"]
        lossy = _row(result.rows, fw, "lossy-fixed")
        assert lossy["resumed_passes_per_token"] > 0  # s1 = 2: q resumes on u's blocks
        assert lossy["full_equivalent_per_token"] == pytest.approx(statistics.median([
            full_equivalent(c, PassCounts(lossy["draft_passes_per_token"], lossy["slim_passes_per_token"],
                                          lossy["full_passes_per_token"], lossy["resumed_passes_per_token"]))
        ]), rel=0.25)


def test_fidelity_fields(result):
    for row in result.rows:
        if row["mode"] in ("audit", "lenient"):  # q is at hand: the audit is free in lenient mode
            assert 0.0 <= row["overrule_rate"] <= 1.0 and 0.0 <= row["tv_distance"] <= 1.0
            assert row["overrule_tier1"] is not None and row["overrule_tier3"] is not None
        else:
            assert row["overrule_rate"] is None and row["tv_distance"] is None
        if row["mode"] != "plain":
            assert 0.0 <= row["next_line_match"] <= 1.0
        assert row["target_ll"] < 0
        if row["analytic_bound"] is not None:
            assert row["fraction_of_bound"] == pytest.approx(row["speedup_vs_ar"] / row["analytic_bound"])
        assert row["peak_mem_mb"] > 0
    params_mb = sum(p.numel() * 4 for p in char_pair_models()[0].parameters()) / 2**20
    assert _row(result.rows, "ar", "-")["peak_mem_mb"] > params_mb  # target params + its KV cache


# ---------------------------------------------------------------------------- pure parts


def test_positional_agreement_counts_same_position_matches_only():
    assert positional_agreement([1, 2, 3, 4], [1, 9, 3, 4]) == 3
    assert positional_agreement([2, 3, 4], [1, 2, 3]) == 0  # shifted by one: no re-alignment
    assert positional_agreement([1, 2], [1, 2, 3]) == 2


def test_score_output_by_hand(pair):
    ids, tokens = [5, 6, 7], [8, 9]
    with torch.no_grad():
        logits = pair.target(torch.tensor([ids + tokens])).logits[0].log_softmax(-1)
    expected = float(logits[2, 8] + logits[3, 9])
    rows = []
    handle = pair.target.get_output_embeddings().register_forward_hook(lambda m, i, out: rows.append(out.shape[-2]))
    try:
        score = score_output(pair.target, ids, tokens)
    finally:
        handle.remove()
    assert rows == [len(tokens) + 1]  # the head projects the scored columns only, not the prompt's
    assert score.log_likelihood == pytest.approx(expected, abs=1e-5) and score.tokens == 2
    assert score.argmax_matches == int(logits[2].argmax() == 8) + int(logits[3].argmax() == 9)


def test_next_line_scoring():
    from viasd_adapt.training.tokenizer import train_tokenizer

    tok = train_tokenizer(PROMPTS * 20, 300)
    assert next_line("\n    return a + b\n    x") == "    return a + b" and next_line("no break") is None
    ids = tok("\n    return a + b\nmore", add_special_tokens=False)["input_ids"]
    assert next_line_match(tok, ids, "    return a + b")
    assert not next_line_match(tok, ids, "return a + b")  # indentation counts
    late = tok("x\n    return a + b\n", add_special_tokens=False)["input_ids"]
    assert not next_line_match(tok, late, "    return a + b")  # the prompt's line must end at once


def test_costs_bound_and_full_equivalent_by_hand():
    costs = ForwardCosts(c_draft=1.0, c_slim=2.0, c_resume=3.0, c_full_block=4.0, c_full=3.0, context_length=10, block_length=6)
    # per token: 1*1 + 0.5*2 + 0.25*4 = 3 -> bound 3/3
    assert analytic_bound(costs, PassCounts(draft=1.0, slim=0.5, full=0.25)) == pytest.approx(1.0)
    # overlapped: max(1, 2) = 2 -> 1.5
    assert analytic_bound(costs, PassCounts(draft=1.0, slim=0.5, full=0.25), overlapped_drafting=True) == pytest.approx(1.5)
    assert analytic_bound(costs, PassCounts()) is None
    # a resumed pass is priced at c_resume, not c_full_block: (1 + 0.5*2 + 0.25*3) / 4
    assert full_equivalent(costs, PassCounts(draft=1.0, slim=0.5, full=0.25, resumed=0.25)) == pytest.approx(2.75 / 4)
    assert full_equivalent(costs, PassCounts(single=1.0)) == pytest.approx(3.0 / 4)


def test_run_meter_counts_the_models_own_passes_and_every_cache_layer_once(pair):
    from viasd_adapt.routing.shared import SharedPrefixRunners

    with RunMeter(pair.target, pair.draft) as meter:
        measure = meter.start()
        full = CachedRunner(pair.target)
        full.logits_for([3, 4, 5], 1)
        full.logits_for([3, 4, 5, 6], 1)
        shared = SharedPrefixRunners(pair.target, SlimVerifier(pair.target, char_mask()))  # views built after the hooks
        shared.slim_logits([3, 4, 5], 2)
        shared.full_logits([3, 4, 5], 2)
        CachedRunner(pair.draft).logits_for([3], 1)
        meter.stop()
        assert (measure.full_passes, measure.draft_passes) == (2, 1)  # views are not the target itself
        kv = shared.cache_bytes()
        expected = full.cache_bytes() + kv["full"] + kv["slim"] + kv["shared"]
        draft_kv = sum(layer.keys.numel() * 8 for layer in CachedRunner(pair.draft).cache.layers if getattr(layer, "keys", None) is not None)
        assert sum(measure.layer_peaks.values()) >= expected > 0 and draft_kv == 0
    assert not pair.target._forward_hooks_with_kwargs  # hooks removed on exit


def test_fallback_mask_keeps_layer_zero_and_skips_round_r_l():
    mask = fallback_mask(16, 0.45)
    assert mask.keep[0] and mask.num_skipped == 7
    assert list(mask.skipped) == [1, 3, 5, 7, 9, 11, 13]
    assert fallback_mask(4, 0.75).num_skipped == 3 and fallback_mask(4, 0.75).keep[0]


def test_verdict_names_the_cheapest_row_within_the_budget():
    def row(mode, feq, drop):
        return {"framework": "hf", "mode": mode, "full_equivalent_per_token": feq, "ll_drop": drop}

    rows = [{"framework": "ar", "mode": "-"}, row("none", 0.5, 0.0), row("lenient", 0.3, 0.01), row("lossless", 0.6, 0.0),
            row("lossy", 0.25, 0.05)]
    (line,) = verdict(rows, max_ll_drop=0.02)
    assert "is lenient" in line and "does not pay" in line  # lossy is cheaper but outside the budget
    (line,) = verdict(rows, max_ll_drop=0.1)
    assert "is lossy" in line and "pays" in line and "does not" not in line


def test_verdict_calls_a_tier_win_inside_the_noise_margin_a_tie_and_recommends_the_simpler_row():
    def row(mode, feq, drop=0.0):
        return {"framework": "pearl", "mode": mode, "full_equivalent_per_token": feq, "ll_drop": drop, "regret": 0.0}

    assert tier_beats(0.96, 1.0) and not tier_beats(0.975, 1.0) and tier_beats(0.5, None)
    assert tier_beats(0.975, 1.0, margin=0.02) and not tier_beats(1.0, 1.0, margin=0.0)
    (line,) = verdict([row("none", 1.003), row("lenient", 1.003), row("lossless", 1.000), row("lossy", 1.039)])
    assert "lossless costs 1.000 against none's 1.003 (0.3% less), not more than the 3% margin" in line
    assert "does not pay here: use none" in line
    assert "pays here." not in line
    (line,) = verdict([row("none", 1.0), row("lenient", 0.9), row("lossy-fixed", 0.85)])  # 5.6% better than lenient: a win
    assert "is lossy-fixed" in line and "The slim tier pays here: use lossy-fixed." in line


def test_verdict_weighs_the_adaptive_rows_like_any_tier_row():
    def row(mode, feq, drop=0.0):
        return {"framework": "hf", "mode": mode, "full_equivalent_per_token": feq, "ll_drop": drop, "regret": 0.0}

    rows = [row("none", 1.0), row("lenient", 0.95, 0.01), row("lossless-fixed", 1.2), row("lossless", 0.9),
            row("lossy-fixed", 0.8, 0.05), row("lossy", 0.85, 0.03)]
    (line,) = verdict(rows, max_ll_drop=0.02)  # lossless (adaptive) is exact: admitted with no fidelity measured
    assert "is lossless " in line and "The default (adaptive) tier pays here: use lossless" in line and "lossy 0.850 (LL drop" in line
    (line,) = verdict(rows, max_ll_drop=0.04)  # lossy (adaptive) within, fixed lossy not
    assert "is lossy " in line and "The default (adaptive) tier pays here: use lossy" in line
    (line,) = verdict([rows[0], rows[2], row("lossless", 0.99)], max_ll_drop=0.02)  # within the noise margin of none
    assert "lossless costs 0.990 against none's 1.000 (1.0% less), not more than the 3% margin" in line and "use none" in line
    # the fixed tier is weighed too: where it is the cheapest, the slim tier pays
    (line,) = verdict([rows[0], row("lossless-fixed", 0.7), row("lossless", 0.9)], max_ll_drop=0.02)
    assert "is lossless-fixed" in line and "The slim tier pays here: use lossless-fixed." in line


def test_verdict_recommends_plain_decoding_when_no_drafting_row_beats_it():
    def row(framework, mode, feq, drop=0.0):
        return {"framework": framework, "mode": mode, "full_equivalent_per_token": feq, "ll_drop": drop, "regret": 0.0}

    rows = [row("ar", "-", 0.55), row("hf", "none", 0.71), row("hf", "lenient", 0.66), row("hf", "lossy-fixed", 0.60, 0.01)]
    (line,) = verdict(rows)
    assert "is ar (0.550" in line and "Speculative decoding itself does not pay here" in line and "use ar" in line
    (line,) = verdict([row("ar", "-", 0.80)] + rows[1:])  # cheaper drafting rows: AR is only a candidate
    assert "is lossy" in line and "The slim tier pays here: use lossy-fixed." in line


# ---------------------------------------------------------------------------- per-prompt sums


def test_every_row_keeps_its_sums_per_prompt_and_they_pool_to_the_row(result):
    for row in result.rows:
        if row["mode"] == "plain":
            continue
        sums = row["per_prompt"]
        assert len(sums["tokens"]) == len(PROMPTS) and sum(sums["tokens"]) == 3 * 10 * len(PROMPTS)
        # greedy: every repeat spends the same passes, so the ratio of sums is the median row
        assert sum(sums["cost"]) / sum(sums["tokens"]) == pytest.approx(row["full_equivalent_per_token"], rel=1e-6)
        assert sum(sums["regret"]) / sum(sums["tokens"]) == pytest.approx(row["regret"], rel=1e-6, abs=1e-9)
    audit = next(r for r in result.rows if r["mode"] == "audit")
    assert sum(audit["per_prompt"]["overruled"]) / sum(audit["per_prompt"]["audited"]) == pytest.approx(audit["overrule_rate"])


def test_the_verdict_on_a_run_states_its_uncertainty_at_its_number_of_prompts(result):
    # a busy machine adds one line about the price list's spread (tests/bench/test_price_spread_line.py): not a verdict
    lines = [line for line in verdict(result.rows, prices=result.prices) if not line.startswith("BUSY MACHINE")]
    assert lines
    for line in lines:
        assert f"etermined at {len(PROMPTS)} prompts" in line and "resamples of the prompts and price rounds" in line
    for line in verdict(result.rows):  # without the run's price list, only the prompts are resampled
        assert "resamples of the prompts)" in line


def test_the_report_keeps_the_sums_and_an_old_report_loads_and_says_it_cannot_state_an_uncertainty(result):
    rows = [{k: v for k, v in r.items() if k != "repeats"} for r in result.rows]
    report = BenchReport.model_validate({"rows": rows})
    again = BenchReport.model_validate(report.to_json())
    assert again.rows[0].per_prompt.tokens == rows[0]["per_prompt"]["tokens"]
    old = BenchReport.model_validate({"rows": [{k: v for k, v in r.items() if k != "per_prompt"} for r in rows]})
    assert all(row.per_prompt is None for row in old.rows)
    old_lines, new_lines = verdict([r.model_dump() for r in old.rows]), verdict(rows)
    assert len(old_lines) == len(new_lines) == 2
    for line, new in zip(old_lines, new_lines):
        assert "No uncertainty can be stated" in line
        assert line.split(" all: ")[0] == new.split(" all: ")[0]  # the same rows, the same cheapest row


def test_a_projection_prices_the_per_prompt_passes_again(result):
    model = load_cost_model("h200-llama2-7b")
    projected = project_rows(result.rows, model, char_mask(), 4)
    for row, before in zip(projected, result.rows):
        if row.get("per_prompt") is None:
            continue
        assert sum(row["per_prompt"]["cost"]) / sum(row["per_prompt"]["tokens"]) == pytest.approx(
            row["full_equivalent_per_token"], rel=1e-6)
        assert row["per_prompt"]["cost"] != before["per_prompt"]["cost"]


def test_the_report_lines_hold_the_tables_the_costs_and_the_verdict(result):
    lines = result_lines(result, ["hf: a verdict"])
    assert lines[-2:] == ["verdict:", "  hf: a verdict"]
    text = "\n".join(lines)
    assert text.index("speed (cost):") < text.index("hf/lossy") < text.index("fidelity (") < text.index("per-forward costs")
    assert f"next_line = exact match on {len(TASK)} held-out next lines" in text
    assert "verdict:" not in result_lines(result, [])  # no verdict, no heading


def test_the_projection_report_prints_and_records_the_same_projected_verdict(result):
    model = load_cost_model("h200-llama2-7b")
    lines, record = projection_report(result.rows, model, char_mask(), 4, Budget())
    assert lines[0].startswith("\nPROJECTION, not a measurement") and model.label in lines[0]
    assert record["verdict"] and lines[2:] == [f"  projected: {line}" for line in record["verdict"]]
    assert [(r["framework"], r["mode"]) for r in record["rows"]] == [(r["framework"], r["mode"]) for r in result.rows]


# ---------------------------------------------------------------------------- CLI, files, errors


def test_cli_bench_writes_json_and_plot(tmp_path, char_pair):
    pair_dir = char_pair
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["bench", "--target", str(pair_dir / "target"), "--draft", str(pair_dir / "draft"), "--prompts", str(prompts),
            "--max-new-tokens", "6", "--repeats", "2", "--frameworks", "hf", "--modes", "lenient,lossy,audit",
            "--task-prompts", "1", "--json", str(out_json), "--plot", str(out_png), "--preset", "conservative"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "hf/lossy" in res.output and "verdict:" in res.output and "FALLBACK" not in res.output
    assert "feq/tok" in res.output and "LL_drop" in res.output
    data = json.loads(out_json.read_text())
    assert [(r["framework"], r["mode"]) for r in data["rows"]] == [
        ("ar", "-"), ("hf", "plain"), ("hf", "none"), ("hf", "lenient"), ("hf", "lossy"), ("hf", "lossy-fixed"), ("hf", "audit")]
    assert data["run"]["settings"]["alpha1"] == 0.2 and data["run"]["settings"]["alpha2"] == 0.1
    assert data["run"]["mask"]["skipped_layers"] == [2, 4] and not data["run"]["mask"]["is_fallback"]
    assert data["peak_mem_source"].startswith("parameter bytes") and data["run"]["verdict"]
    assert data["hardware"]["device"] == "cpu" and data["hardware"]["dtype"] == "float32"  # where it was measured
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_rows_writes_png_with_missing_values(tmp_path):
    rows = [{"framework": "ar", "mode": "-", "speedup_vs_ar": 1.0, "analytic_bound": 1.0, "full_equivalent_per_token": 0.8,
             "ll_drop": 0.0},
            {"framework": "hf", "mode": "lossy", "speedup_vs_ar": 1.4, "analytic_bound": None,
             "full_equivalent_per_token": None, "ll_drop": None}]
    path = plot_rows(rows, tmp_path / "sub" / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_give_clear_errors(tmp_path, pair):
    with pytest.raises(ConfigError, match="unknown framework"):
        RunPlan(frameworks=("vllm",))
    with pytest.raises(ConfigError, match="unknown mode"):
        RunPlan(modes=("fast",))
    with pytest.raises(ConfigError, match="unknown mode"):
        RunPlan(modes=("audit-adaptive",))
    with pytest.raises(ConfigError, match="unknown mode"):
        RunPlan(modes=("audit-fixed",))
    # the fixed twins: beside the default (adaptive) rows, named once, none with --no-adaptive
    assert RunPlan(modes=("lossy", "lossless")).row_modes == ["lossy", "lossy-fixed", "lossless", "lossless-fixed"]
    assert RunPlan(modes=("lossy", "lossy-fixed")).row_modes == ["lossy", "lossy-fixed"]
    assert RunPlan(modes=("lossy", "lossless"), fixed_twins=False).row_modes == ["lossy", "lossless"]
    # one meaning of "not adaptive" in every command: the tier on every cycle
    assert RunPlan(modes=("lossy", "lossless"), adaptive=False).row_modes == ["lossy-fixed", "lossless-fixed"]
    other = tiny_model("llama", 5, num_layers=LAYERS, vocab_size=CHAR_VOCAB)
    MaskArtifact(char_mask(), 0.33, fingerprint=model_fingerprint(other)).save(tmp_path / "other.json")
    with pytest.raises(ModelMismatchError):
        resolve_mask_info(pair.target, tmp_path / "other.json", 0.45)
    res = CliRunner().invoke(cli, ["bench", "--target", str(tmp_path), "--draft", str(tmp_path)])
    assert res.exit_code == 2 and "not a model directory" in res.output
    assert "Traceback" not in res.output


def test_missing_mask_falls_back_visibly(char_pair):
    pair_dir = char_pair
    (pair_dir / "mask.json").unlink()
    loaded = load_pair(pair_dir / "target", pair_dir / "draft", device="cpu")
    assert loaded.mask.is_fallback and "FALLBACK" in loaded.mask.source
