"""What an engine asks the vLLM plugin for: the tuned.json it reads and the model check (no vLLM needed).

The file served is the shipped demo tuned.json with its choice pinned to its own best lenient point
(tests/support/tuned.py), so these tests hold whatever ``viasd tune`` last chose for the pair."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoConfig

from tests.support.tuned import write_shipped_tuned_as
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.serving.config import check_model, config_fingerprint, parse_request

ASSETS = Path(__file__).resolve().parents[2] / "viasd_adapt" / "assets"
#: Stands for the pinned lenient file in parametrized requests (its path exists only once the fixture ran).
PINNED = object()


@pytest.fixture(scope="module")
def demo_tuned(tmp_path_factory) -> Path:
    """The demo pair's tuned.json (its fingerprint and drafter record) choosing its best lenient point."""
    return write_shipped_tuned_as("demo", tmp_path_factory.mktemp("demo-lenient"), "lenient")


def _request(**viasd):
    return {"viasd": viasd}


def test_an_engine_that_did_not_ask_gets_stock_vllm():
    assert parse_request(None) is None
    assert parse_request({}) is None
    assert parse_request({"some_other_plugin": {"x": 1}}) is None


def test_the_tuned_lenience_is_served(demo_tuned):
    rule = parse_request(_request(tuned=str(demo_tuned)))
    tuned = json.loads(demo_tuned.read_text())
    assert tuned["choice"] == "lenient" and tuned["settings"]["lenience"] > 0
    assert rule.lenience == tuned["settings"]["lenience"] and not rule.is_stock
    assert "overrule" in rule.describe()


@pytest.mark.parametrize("pair", ["demo", "demo-ee", "smollm2"])
def test_the_shipped_tuned_files_are_served_as_their_choice_says(pair):
    """What the plugin does with each shipped file as ``viasd tune`` last wrote it: a lenient choice
    serves its lenience, plain SD serves stock vLLM, the target alone and a slim tier are refused."""
    path = ASSETS / pair / "tuned.json"
    choice, settings = json.loads(path.read_text())["choice"], json.loads(path.read_text())["settings"]
    if choice == "ar":
        with pytest.raises(ConfigError, match=r"recommends the target alone \(choice 'ar'\)"):
            parse_request(_request(tuned=str(path)))
    elif choice in ("none", "lenient"):
        rule = parse_request(_request(tuned=str(path)))
        assert rule.choice == choice and rule.lenience == (settings.get("lenience", 0.5) if choice == "lenient" else 0.0)
        assert rule.is_stock is (choice == "none")
    else:
        with pytest.raises(ConfigError, match="docs/serving.md"):
            parse_request(_request(tuned=str(path)))


def test_lenience_can_be_overridden_to_zero(demo_tuned):
    rule = parse_request(_request(tuned=str(demo_tuned), lenience=0))
    assert rule.lenience == 0.0 and rule.is_stock


def test_plain_sd_choice_serves_stock(tmp_path, demo_tuned):
    data = json.loads(demo_tuned.read_text())
    data["choice"], data["settings"]["mode"] = "none", "none"
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    assert parse_request(_request(tuned=str(path))).lenience == 0.0


def test_a_slim_tier_choice_is_refused_with_the_reason(tmp_path, demo_tuned):
    data = json.loads(demo_tuned.read_text())
    data["choice"], data["settings"]["mode"] = "lossy-fixed", "lossy"
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="docs/serving.md"):
        parse_request(_request(tuned=str(path)))


@pytest.mark.parametrize("request_, match", [
    ({"viasd": "tuned.json"}, "must be a dict"),
    (_request(), "needs 'tuned'"),
    (_request(tuned="x.json", lenient=0.3), "unknown key"),
    (_request(tuned=PINNED, lenience=1.0), r"lenience must be a number in \[0, 1\)"),
    (_request(tuned=PINNED, lenience=-0.1), "lenience"),
    (_request(tuned=PINNED, lenience="0.3"), "lenience"),
    (_request(tuned=PINNED, audit=3), "audit"),
    (_request(tuned="/nonexistent/tuned.json"), "does not exist"),
])
def test_bad_requests_are_refused(request_, match, demo_tuned):
    viasd = request_["viasd"]
    if isinstance(viasd, dict) and viasd.get("tuned") is PINNED:
        request_ = _request(**{**viasd, "tuned": str(demo_tuned)})
    with pytest.raises(ConfigError, match=match):
        parse_request(request_)


def test_a_file_that_is_not_tuned_settings_is_refused(tmp_path):
    bad = tmp_path / "mask.json"
    bad.write_text(json.dumps({"mask": [1, 0]}))
    with pytest.raises(ConfigError, match="not a viasd-adapt tuned-settings file"):
        parse_request(_request(tuned=str(bad)))
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_request(_request(tuned=str(bad)))


def test_the_model_it_was_tuned_on_is_accepted(demo_tuned):
    folder = ASSETS / "demo" / "target"
    rule = parse_request(_request(tuned=str(demo_tuned)))
    check_model(rule, AutoConfig.from_pretrained(folder), str(folder))


def test_another_model_of_the_same_shape_is_refused_by_its_weights(demo_tuned):
    # demo-ee's target has demo's architecture and sizes (retrained with early-exit losses):
    # only the weight sketch read from its safetensors tells them apart
    folder = ASSETS / "demo-ee" / "target"
    cfg = AutoConfig.from_pretrained(folder)
    rule = parse_request(_request(tuned=str(demo_tuned)))
    assert config_fingerprint(cfg)["num_layers"] == rule.fingerprint["num_layers"]
    with pytest.raises(ModelMismatchError, match="tuned on another model") as err:
        check_model(rule, cfg, str(folder))
    assert str(folder) in str(err.value) and str(demo_tuned) in str(err.value)  # both named


def test_another_architecture_is_refused_by_name(demo_tuned):
    cfg = AutoConfig.from_pretrained(ASSETS / "demo" / "target")
    cfg.num_hidden_layers, cfg.hidden_size = 30, 576
    rule = parse_request(_request(tuned=str(demo_tuned)))
    with pytest.raises(ModelMismatchError, match=r"16 layers.*this engine serves 'HuggingFaceTB/SmolLM2-135M-Instruct'.*30 layers"):
        check_model(rule, cfg, "HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id: sizes alone are compared


def test_a_file_without_fingerprint_is_refused(tmp_path, demo_tuned):
    data = json.loads(demo_tuned.read_text())
    data["fingerprint"] = {}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    rule = parse_request(_request(tuned=str(path)))
    with pytest.raises(ModelMismatchError, match="no model fingerprint"):
        check_model(rule, AutoConfig.from_pretrained(ASSETS / "demo" / "target"), "m")


# ------------------------------------------------------------------ the same reader as viasd generate


def _variant(tmp_path, source: Path, **changes) -> str:
    data = json.loads(source.read_text())
    for key, value in changes.items():
        if key == "settings":
            data["settings"] = value
        else:
            data[key] = value
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_future_version_is_refused_as_viasd_generate_refuses_it(tmp_path, demo_tuned):
    from viasd_adapt.config.tuned import TunedSettings

    path = _variant(tmp_path, demo_tuned, version=99)
    with pytest.raises(ConfigError, match=r"'version' 99 is not one this viasd-adapt reads"):
        TunedSettings.load(path)
    with pytest.raises(ConfigError, match=r"'version' 99 is not one this viasd-adapt reads"):
        parse_request(_request(tuned=path))


def test_a_bogus_measured_on_is_refused_by_its_name(tmp_path, demo_tuned):
    with pytest.raises(ConfigError, match=r"tuned\.json: 'measured_on' must name the framework .*got 'gpu'"):
        parse_request(_request(tuned=_variant(tmp_path, demo_tuned, measured_on="gpu")))


def test_a_lenient_file_without_a_lenience_is_served_at_the_tier_settings_default(tmp_path, demo_tuned):
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.core.settings import TierSettings

    path = _variant(tmp_path, demo_tuned, settings={"mode": "lenient"})
    rule = parse_request(_request(tuned=path))
    # one definition, the one viasd generate runs: TierSettings' default tolerance, not stock vLLM
    assert rule.lenience == TunedSettings.load(path).settings.lenience == TierSettings().lenience == 0.5
    assert not rule.is_stock and rule.choice == "lenient"


def test_serving_imports_without_torch_or_vllm(demo_tuned):
    import subprocess
    import sys

    code = ("import sys; from viasd_adapt.serving.config import parse_request; import viasd_adapt.serving.vllm_plugin; "
            f"rule = parse_request({{'viasd': {{'tuned': {str(demo_tuned)!r}}}}}); assert rule.lenience > 0; "
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')); assert not loaded, loaded[:3]")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr


def test_a_lenience_tuned_with_another_drafter_is_refused_and_the_right_one_is_served(tmp_path, demo_tuned):
    """The tolerance that keeps regret within budget depends on the drafter: the plugin serves a
    tuned lenience only with the drafter it was measured with, as viasd generate applies it."""
    from types import SimpleNamespace

    from viasd_adapt.serving.config import check_drafter

    demo = json.loads(demo_tuned.read_text())
    drafter_config = AutoConfig.from_pretrained(ASSETS / "demo" / "draft")
    as_model = SimpleNamespace(method="draft_model", draft_model_config=SimpleNamespace(hf_config=drafter_config))
    ngram = SimpleNamespace(method="ngram")
    eagle = SimpleNamespace(method="eagle")
    rule = parse_request(_request(tuned=str(demo_tuned)))  # measured with the demo pair's drafter model
    assert rule.drafter == demo["drafter"] and not rule.lenience_given
    check_drafter(rule, as_model)  # its own drafter: served
    with pytest.raises(ConfigError, match=r"measured with another drafter: a drafter model \(LlamaForCausalLM\); this run "
                                          r"drafts with prompt lookup.*lenience \(" + re.escape(str(demo["settings"]["lenience"]))
                                              + r"\) was tuned for that drafter"):
        check_drafter(rule, ngram)
    with pytest.raises(ConfigError, match=r"a drafter model \(LlamaForCausalLM\) on the engine framework; this run "
                                          r"drafts with its EAGLE head"):
        check_drafter(rule, eagle)
    other_model = SimpleNamespace(method="draft_model", draft_model_config=SimpleNamespace(
        hf_config=AutoConfig.from_pretrained(ASSETS / "demo" / "target")))
    with pytest.raises(ConfigError, match=r"this run's drafter model is not the one recorded \(num_layers: "):
        check_drafter(rule, other_model)
    # a lenience the request gives, plain SD, and a file that records no drafter are not checked
    check_drafter(parse_request(_request(tuned=str(demo_tuned), lenience=0.3)), ngram)
    check_drafter(parse_request(_request(tuned=str(demo_tuned), lenience=0)), ngram)
    unrecorded = {key: value for key, value in demo.items() if key != "drafter"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(unrecorded))
    check_drafter(parse_request(_request(tuned=str(path))), ngram)
    # measured with prompt lookup: served with n-gram drafting only
    lookup = _variant(tmp_path, demo_tuned, drafter="prompt-lookup")
    check_drafter(parse_request(_request(tuned=lookup)), ngram)
    with pytest.raises(ConfigError, match="measured with another drafter: prompt lookup; this run drafts with a drafter model"):
        check_drafter(parse_request(_request(tuned=lookup)), as_model)


def test_a_target_alone_choice_is_refused_saying_to_serve_without_speculation(tmp_path, demo_tuned):
    """tuned.json's ``ar``: the target alone was cheapest when tuned, so there is no rule to serve;
    the refusal says so with the tune's figures (not the slim tier's reason). Control: ``sd`` serves."""
    data = json.loads(demo_tuned.read_text())
    data["choice"], data["settings"]["mode"] = "ar", "none"
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"recommends the target alone \(choice 'ar'\).*without speculative decoding"):
        parse_request(_request(tuned=str(path)))
    data["choice"] = "none"
    path.write_text(json.dumps(data))
    assert parse_request(_request(tuned=str(path))).is_stock
