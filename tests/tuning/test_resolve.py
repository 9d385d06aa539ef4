"""The one resolver (viasd_adapt.config.resolve.resolve_settings): its layers, the source of every value,
one read of tuned.json, and the one budget rule shared by tune and the bench's verdict."""

from __future__ import annotations

import warnings

import pytest

from tests.support.tuned import BEST_LENIENT, BEST_VIASD, LENIENT, write_tuned
from viasd_adapt.config.budget import Budget
from viasd_adapt.bench.verdict import verdict
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.provenance import Source, SourceKind
from viasd_adapt.config.resolve import DEFAULT, resolve_settings
from tests.support.loads import count_loads
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.core.settings import CONSERVATIVE, TierSettings
from viasd_adapt.config.tuned import TunedForAnotherMaskWarning, TunedSettings
from viasd_adapt.tuning.tune import Point
from viasd_adapt.engine.context import check_spec_model


@pytest.fixture()
def count_reads(monkeypatch):
    """Every read of a tuned.json goes through TunedSettings.load: count them, per path."""
    return count_loads(monkeypatch, TunedSettings)


def test_every_field_names_its_source_layer_by_layer(tuned_pair, count_reads):
    mask = tuned_pair / "mask.json"
    tuned_file = str(tuned_pair / "tuned.json")
    spec = resolve_settings(mask, flags={"gamma": 3, "alpha2": None})
    assert spec.settings == LENIENT.with_(gamma=3)
    assert spec.sources["gamma"] == Source(SourceKind.FLAG, "flag --gamma")
    assert spec.sources["mode"].kind is SourceKind.TUNED  # the code asks the kind; people read the words
    assert tuned_file in str(spec.sources["mode"]) and "choice lenient" in str(spec.sources["mode"])
    assert spec.sources["alpha2"].kind is not SourceKind.FLAG  # None means "not given"
    assert count_reads == [tuned_file]

    preset = resolve_settings(mask, preset="conservative", flags={"alpha1": 0.05})
    assert preset.settings.alpha2 == CONSERVATIVE["alpha2"] and preset.sources["alpha2"] == Source.preset("conservative")
    assert preset.settings.alpha1 == 0.05 and str(preset.sources["alpha1"]) == "flag --alpha1"  # flags beat the preset


def test_without_a_tuned_file_everything_is_a_default(char_pair_with_mask):
    spec = resolve_settings(char_pair_with_mask / "mask.json")
    assert spec.settings == TierSettings() and set(spec.sources.values()) == {DEFAULT} and spec.tuned is None
    assert any("none beside the mask" in line for line in spec.explain())


def test_the_bench_layer_runs_the_tuners_best_points(tuned_pair, count_reads):
    spec = resolve_settings(pair_mask=tuned_pair / "mask.json", best_points=True)
    assert spec.mask_path == tuned_pair / "mask.json"
    assert spec.settings.lenience == BEST_LENIENT.lenience and "best lenient point" in str(spec.sources["lenience"])
    for name in ("alpha1", "alpha2", "greedy_gates", "ratio"):
        assert getattr(spec.settings, name) == getattr(BEST_VIASD, name) and spec.sources[name].kind is SourceKind.TUNED and "best VIA-SD point" in str(spec.sources[name])
    assert spec.settings.mode.value == "lenient"  # the choice's mode; the bench sets each row's mode
    assert any("tiered rows" in note for note in spec.notes)
    assert len(count_reads) == 1  # the mask choice and the settings share one read
    # an alpha given on the command line keeps the VIA-SD point out, as before
    flagged = resolve_settings(tuned_pair / "mask.json", best_points=True, flags={"alpha1": 0.7})
    assert flagged.settings.alpha1 == 0.7 and flagged.settings.alpha2 == TierSettings().alpha2


def test_a_choice_measured_with_another_mask_is_not_applied_and_says_so(tuned_pair):
    viasd = TierSettings(mode="lossy", alpha1=0.1)
    artifact = MaskArtifact.load(tuned_pair / "mask.json")
    TunedSettings(viasd, "lossy-fixed", [1] * artifact.mask.num_layers, artifact.fingerprint).save(tuned_pair / "tuned.json")
    with pytest.warns(TunedForAnotherMaskWarning):
        spec = resolve_settings(tuned_pair / "mask.json")
    assert spec.settings == TierSettings() and not spec.tuned_applied
    assert any("not applied" in line for line in spec.explain())


def test_a_tuned_file_of_another_model_is_refused_when_a_model_is_given(tuned_pair):
    other = tiny_model("llama", 7, num_layers=2, vocab_size=112)
    spec = resolve_settings(tuned_pair / "mask.json")
    with pytest.raises(ModelMismatchError, match="tuned.json"):
        check_spec_model(spec, other)


def test_a_framework_with_no_tier_forces_mode_none_and_refuses_a_tier(tuned_pair):
    spec = resolve_settings(tuned_pair / "mask.json", framework="ar", has_tier=False)
    assert spec.settings.mode.value == "none" and "framework ar" in str(spec.sources["mode"])
    assert spec.sources["mode"].kind is SourceKind.RULE
    with pytest.raises(ConfigError, match="--framework ar has no tier"):
        resolve_settings(tuned_pair / "mask.json", framework="ar", has_tier=False, flags={"mode": "lossy"})
    # control: the name alone forces nothing; the capability does
    assert resolve_settings(tuned_pair / "mask.json", framework="ar").settings.mode.value != "none"
    with pytest.raises(ConfigError, match="unknown tier setting"):
        resolve_settings(tuned_pair / "mask.json", flags={"alpha3": 0.1})


def test_explain_says_which_framework_the_measurement_rests_on(tuned_pair):
    write_tuned(tuned_pair, measured_on="engine")
    lines = "\n".join(resolve_settings(tuned_pair / "mask.json", framework="hf").explain())
    assert "measured on the engine framework" in lines and "--framework hf runs settings measured on the engine" in lines
    same = "\n".join(resolve_settings(tuned_pair / "mask.json", framework="engine").explain())
    assert "measured on the engine framework" in same and "--framework engine runs" not in same


# ------------------------------------------------------------------------------------- one budget rule


def _row(framework, mode, cost, ll_drop=0.0, regret=0.0, overrule=None):
    return {"framework": framework, "mode": mode, "full_equivalent_per_token": cost, "ll_drop": ll_drop,
            "regret": regret, "overrule_rate": overrule}


def test_the_verdict_honours_max_overrule():
    rows = [_row("hf", "none", 1.0), _row("hf", "lenient", 0.6, ll_drop=0.01, regret=0.01, overrule=0.3)]
    assert "use lenient" in verdict(rows)[0]  # no overrule bound: lenient is cheapest within LL drop and regret
    (line,) = verdict(rows, max_overrule=0.1)
    assert "use none" in line and "an overrule rate of 0.1" in line  # over the overrule budget: not recommended
    assert "use none" in verdict(rows, budget=Budget(max_overrule=0.1))[0]


@pytest.mark.parametrize("overrule, within", [(0.05, True), (0.3, False), (None, False)])
def test_tune_and_the_verdict_judge_a_setting_alike(overrule, within):
    budget = Budget(max_overrule=0.1)
    point = Point("lenient", TierSettings(mode="lenient"), None, 0.6, 0.01, overrule, 10, regret=0.01)
    assert budget.admits(point) is within
    rows = [_row("hf", "none", 1.0), _row("hf", "lenient", 0.6, ll_drop=0.01, regret=0.01, overrule=overrule)]
    assert ("use lenient" in verdict(rows, budget=budget)[0]) is within


def test_the_budget_is_checked_once_for_both():
    with pytest.raises(ConfigError, match="max_overrule"):
        verdict([_row("hf", "none", 1.0)], max_overrule=1.5)
    with pytest.raises(ConfigError, match="at least one bound"):
        Budget(None, None, None)


@pytest.fixture()
def char_pair_with_mask(tmp_path):
    from tests.support.pairs import save_char_pair

    return save_char_pair(tmp_path / "plain-pair", with_mask=True)


def test_mask_bits_are_read_once_per_resolution(tuned_pair, monkeypatch):
    """The bench layer compares the VIA-SD point's mask with the run's: one read of each file."""
    loads = count_loads(monkeypatch, MaskArtifact)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve_settings(tuned_pair / "mask.json", best_points=True)
    assert loads == [str(tuned_pair / "mask.json")]  # the point's mask is the run's mask: compared, read once
