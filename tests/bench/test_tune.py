"""``viasd tune``: candidates, budget, frontier, the chosen setting and its artifact, on a tiny pair."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.support.tuned import CPU_STAMP
from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import OLD_NAMES_OF_VERSION_1, OldTunedNamesWarning, TunedForAnotherMaskWarning, TunedSettings
from viasd_adapt.config.resolve import resolve_settings, tuned_mask_path
from viasd_adapt.engine.context import open_context
from viasd_adapt.tuning.tune import Budget, Point, TuneGrid, pareto
from viasd_adapt.routing.mask import check_tuned_model


def point(family, feq, drop, mode="lossy", regret=0.0):
    return Point(family, TierSettings(mode=mode), None, feq, drop, 0.0, 10, regret=regret)


def test_pareto_and_budget():
    points = [point("lossy-fixed", 0.5, 0.01), point("lossy-fixed", 0.4, 0.05), point("lossy-fixed", 0.6, 0.0), point("lossy-fixed", 0.45, 0.02),
              point("lossy-fixed", 0.7, 0.03)]
    assert [(p.full_equivalent, p.ll_drop) for p in pareto(points)] == [(0.4, 0.05), (0.45, 0.02), (0.5, 0.01), (0.6, 0.0)]
    budget = Budget(max_ll_drop=0.02, max_overrule=0.1)
    assert budget.admits(point("lossy-fixed", 1, 0.02)) and not budget.admits(point("lossy-fixed", 1, 0.021))
    exact = point("none", 1, 0.5, mode="none")  # exact modes always qualify, whatever the noise says
    assert budget.admits(exact)
    over = Point("lenient", TierSettings(mode="lenient"), None, 1, 0.0, 0.2, 10, regret=0.0)
    assert not budget.admits(over)
    # the default budget also bounds the regret: a negative drop (likelier text) does not buy a high regret
    assert Budget().admits(point("lossy-fixed", 1, -0.05, regret=0.02))
    assert not Budget().admits(point("lossy-fixed", 1, -0.05, regret=0.021))
    assert not Budget().admits(point("lossy-fixed", 1, 0.0, regret=None))  # unmeasured is not within the bound
    assert Budget(max_ll_drop=0.02, max_regret=None).admits(point("lossy-fixed", 1, 0.0, regret=None))
    with pytest.raises(ConfigError):
        Budget(max_ll_drop=float("nan"))
    with pytest.raises(ConfigError):
        TuneGrid(alpha1=(1.5,))
    with pytest.raises(ConfigError):
        TuneGrid(greedy_gates=("sideways",))


def test_a_tier_point_must_beat_the_simpler_settings_by_more_than_the_noise_margin():
    from viasd_adapt.tuning.tune import choose

    budget = Budget(max_ll_drop=0.02, max_regret=None)
    sd, lenient = point("none", 0.60, 0.0, mode="none"), point("lenient", 0.50, 0.01, mode="lenient")
    close = point("lossy-fixed", 0.49, 0.01)  # 2% cheaper than lenient: within the margin
    clear = point("lossy-fixed", 0.45, 0.01)  # 10% cheaper: a win
    assert choose([sd, lenient, close], budget) is lenient
    assert choose([sd, lenient, close], budget, margin=0.0) is close
    assert choose([sd, lenient, clear], budget) is clear
    exact_tie = point("lossless", 0.59, 0.0, mode="lossless")  # the cascade 1.7% under plain SD
    assert choose([sd, exact_tie], budget) is sd
    assert choose([exact_tie], budget) is exact_tie  # nothing simpler within budget


def test_the_adaptive_twins_are_of_the_lossless_point_and_the_cheapest_lossy_point_within_budget():
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.tuning.tune import TuneResult, _adaptive_candidates, choose

    budget = Budget(max_ll_drop=0.02, max_regret=None)
    masks = {"a.json": RoutingMask.from_skipped(4, [1]), "b.json": RoutingMask.from_skipped(4, [2])}

    def on(mask, family, feq, drop, **settings):
        mode = {"lossless-fixed": "lossless", "lossy-fixed": "lossy"}[family]
        return Point(family, TierSettings(mode=mode, adaptive=False, **settings), mask, feq, drop, 0.0, 10, regret=0.0)

    points = [point("none", 0.6, 0.0, mode="none"), on("a.json", "lossless-fixed", 0.7, 0.0),
              on("a.json", "lossy-fixed", 0.4, 0.05, alpha1=0.8), on("a.json", "lossy-fixed", 0.5, 0.01, alpha1=0.3),
              on("a.json", "lossy-fixed", 0.55, 0.0, alpha1=0.0), on("b.json", "lossless-fixed", 0.8, 0.0), on("b.json", "lossy-fixed", 0.3, 0.09)]
    fixed = TuneResult(points, points[0], budget, {}, {}, 0.0)
    twins = list(_adaptive_candidates(fixed, masks))
    assert [(family, mask) for family, _, mask in twins] == [
        ("lossless", "a.json"), ("lossy", "a.json"), ("lossless", "b.json")]  # b: no lossy within
    assert twins[1][1] == TierSettings(mode="lossy", alpha1=0.3) and all(s.adapts for _, s, _ in twins)
    # weighed like any tier point: exact when lossless, beaten by simpler settings within the noise margin
    adaptive = Point("lossless", twins[0][1], "a.json", 0.5, 0.0, 0.0, 10, regret=0.0)
    assert adaptive.exact and choose(points + [adaptive], budget) is adaptive
    close = Point("lossless", twins[0][1], "a.json", 0.59, 0.0, 0.0, 10, regret=0.0)
    assert choose([points[0], close], budget) is points[0]


def test_tune_cli_end_to_end_writes_a_fingerprinted_choice(tmp_path, char_pair):
    pair = char_pair
    out = tmp_path / "pair" / "tuned.json"
    args = ["tune", "--pair", str(pair), "--alpha1", "0,0.5", "--alpha2", "0.2", "--lenience", "0.3,0.9",
            "--greedy-gates", "top", "--prompts", "2", "--max-new-tokens", "8", "--gamma", "3", "--ratios", "0.5",
            "--search-steps", "4", "--json", str(tmp_path / "points.json")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "VERDICT" in res.output and out.is_file() and (tmp_path / "pair" / "tuned-frontier.png").is_file()
    assert (tmp_path / "pair" / "mask-r0.50.json").is_file()  # the searched mask for r = 0.5 is kept
    points = json.loads((tmp_path / "points.json").read_text())["points"]
    families = {p["family"] for p in points}
    assert families - {"lossy"} == {"none", "lenient", "lossless-fixed", "lossy-fixed", "lossless"}
    assert len([p for p in points if p["family"] == "lossy-fixed"]) == 2 * 1 * 2  # alpha1 x alpha2 x masks
    # the adaptive twins: one lossless per mask, one lossy per mask with a lossy point within budget;
    # the fixed points run the tier on every cycle, and say so
    adaptive = [p for p in points if p["family"] in ("lossless", "lossy")]
    assert len([p for p in adaptive if p["family"] == "lossless"]) == 2 and len(adaptive) <= 4
    assert all("adaptive" not in p["settings"] for p in adaptive)  # on: the default, not written
    assert all(p["settings"]["adaptive"] is False for p in points if p["family"] in ("lossless-fixed", "lossy-fixed"))
    tuned = TunedSettings.load(out)
    # the framework the measurement rests on is recorded and said
    assert tuned.measured_on == "engine" and json.loads(out.read_text())["measured_on"] == "engine"
    assert "measured on: the engine framework's loop" in res.output
    # artifacts name their masks relative to themselves: no path of this machine
    assert str(tmp_path) not in out.read_text() and str(tmp_path) not in (tmp_path / "points.json").read_text()
    # 2 calibration prompts cannot show that a lossy saving holds (a lossy setting needs 5 distinct
    # prompts), so the exact-first rule writes an exact setting, or the target alone, and says why
    # in one line with the figures of the comparison that decided it
    assert tuned.settings.mode.is_exact
    assert tuned.report.why and tuned.report.why in res.output
    written_point = next(p for p in points if p["settings"] == tuned.settings.to_dict())
    assert written_point["family"] in ("none", "lossless-fixed", "lossless")
    assert tuned.choice in ("ar", written_point["family"])
    # the sweep's one price list is in the file and in the report, and every point is priced from it
    assert set(tuned.report.prices["rounds"]) >= {"c_full_block", "c_full"}
    assert "price list (" in res.output
    blocks = {entry["c_full_block"] for entry in tuned.report.costs.values()}
    assert len(blocks) == 1  # one full block price for every mask: no point priced from its own timing
    # commands pick the choice up by default; the tuned file is refused for another model
    assert resolve_settings(pair / "mask.json").settings == tuned.settings
    if tuned.settings.mode.uses_slim:
        assert tuned_mask_path(pair / "mask.json").is_file()
    with pytest.raises(ModelMismatchError):
        check_tuned_model(tuned, tiny_model("llama", 7, num_layers=6, vocab_size=112))
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "--force" in again.output
    # the same pass counts priced with an H200's forward costs: a projected verdict, the measured choice kept
    projected = CliRunner().invoke(cli, ["tune", "--pair", str(pair), "--reuse", str(tmp_path / "points.json"),
                                         "--costs", "h200-llama2-7b", "--out", str(tmp_path / "projected.json")])
    assert projected.exit_code == 0, projected.output
    assert "PROJECTION, not a measurement" in projected.output and "  projected: VERDICT" in projected.output
    assert TunedSettings.load(tmp_path / "projected.json").choice == tuned.choice
    # the points file says what it is; one written before the tag existed is judged again the same way
    written = json.loads((tmp_path / "points.json").read_text())
    assert written["format"] == "viasd-adapt/tune-points" and written["version"] == 2
    # as such a file was written: untagged, and its families by version 1's names (read with a notice)
    old_names = {new: old for old, new in OLD_NAMES_OF_VERSION_1.items()}
    old_points = [{**p, "family": old_names.get(p["family"], p["family"])} for p in written["points"]]
    old_tuned = {**written["tuned"], "version": 1, "choice": old_names.get(written["tuned"]["choice"], written["tuned"]["choice"])}
    old_tuned["measured"] = {**old_tuned["measured"], "family": old_names.get(old_tuned["measured"]["family"], old_tuned["measured"]["family"])}
    old_tuned["report"] = {**old_tuned["report"], "best_within_budget": {
        old_names.get(k, k): ({**v, "family": old_names.get(v["family"], v["family"])} if v else v)
        for k, v in old_tuned["report"]["best_within_budget"].items()}}
    (tmp_path / "old-points.json").write_text(json.dumps({"points": old_points, "tuned": old_tuned}))
    with pytest.warns(OldTunedNamesWarning, match="old-points.json"):
        old = CliRunner().invoke(cli, ["tune", "--pair", str(pair), "--reuse", str(tmp_path / "old-points.json"),
                                       "--out", str(tmp_path / "old.json")])
    assert old.exit_code == 0, old.output
    assert TunedSettings.load(tmp_path / "old.json").settings == tuned.settings


def test_adapters_use_tuned_settings_only_with_the_mask_they_were_measured_with(char_pair):
    from transformers import AutoModelForCausalLM

    from viasd_adapt.config.mask import MaskArtifact, RoutingMask

    pair = char_pair
    mask_path = pair / "mask.json"
    artifact = MaskArtifact.load(mask_path)
    target = AutoModelForCausalLM.from_pretrained(str(pair / "target"))
    chosen = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.0)
    TunedSettings(chosen, "lossy-fixed", artifact.mask.bits(), artifact.fingerprint, hardware=CPU_STAMP).save(pair / "tuned.json")
    assert open_context(target, mask_path).settings == chosen
    other = MaskArtifact(RoutingMask.from_skipped(6, [1, 5]), 0.33, fingerprint=artifact.fingerprint)
    other.save(pair / "other.json")
    with pytest.warns(TunedForAnotherMaskWarning, match="tuned_mask_path"):  # another mask: defaults, said aloud
        assert open_context(target, pair / "other.json").settings == TierSettings()


def test_bench_runs_the_tuners_best_viasd_point_when_the_verdict_is_lenient(tmp_path, char_pair):
    """A lenient verdict must not leave the bench's tiered rows on defaults: they run the best
    VIA-SD point the tuner measured, with the mask it was measured with."""
    from viasd_adapt.config.mask import MaskArtifact, RoutingMask
    from viasd_adapt.config.tuned import recorded_mask

    pair = char_pair
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    MaskArtifact(RoutingMask.from_skipped(6, [3, 4, 5]), 0.5, fingerprint=fingerprint).save(pair / "mask-exit3.json")
    lenient = TierSettings(mode="lenient", lenience=0.7)
    viasd = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.4, greedy_gates="top", ratio=0.5)
    report = {"best_within_budget": {
        "lenient": {"family": "lenient", "settings": lenient.to_dict(), "mask": None},
        # recorded with an absolute path on another machine: found again by name beside mask.json
        "lossy-fixed": {"family": "lossy-fixed", "settings": viasd.to_dict(), "mask": "/elsewhere/mask-exit3.json"}}}
    TunedSettings(lenient, "lenient", None, fingerprint, report=report, hardware=CPU_STAMP).save(pair / "tuned.json")
    point = TunedSettings.load(pair / "tuned.json").best("lossy-fixed")
    assert point.settings == viasd and recorded_mask(pair / "mask.json", point.mask) == pair / "mask-exit3.json"

    out = tmp_path / "bench.json"
    res = CliRunner().invoke(cli, ["bench", "--pair", str(pair), "--max-new-tokens", "4", "--repeats", "1",
                                   "--num-prompts", "1", "--frameworks", "hf", "--modes", "lenient,lossy",
                                   "--task-prompts", "0", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "the tuner's best VIA-SD point alpha1=0.1 alpha2=0.4 gates=top" in res.output
    run = json.loads(out.read_text())["run"]
    assert run["mask"]["skipped_layers"] == [3, 4, 5]
    assert {k: run["settings"][k] for k in ("alpha1", "alpha2", "greedy_gates", "lenience")} == {
        "alpha1": 0.1, "alpha2": 0.4, "greedy_gates": "top", "lenience": 0.7}
    # an explicit alpha is the user's choice: no silent override
    res = CliRunner().invoke(cli, ["bench", "--pair", str(pair), "--max-new-tokens", "4", "--repeats", "1",
                                   "--num-prompts", "1", "--frameworks", "hf", "--modes", "lossy", "--alpha1", "0.3",
                                   "--task-prompts", "0", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "best VIA-SD point" not in res.output and json.loads(out.read_text())["run"]["settings"]["alpha1"] == 0.3
