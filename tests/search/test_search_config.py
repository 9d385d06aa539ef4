"""One search config: its defaults are ``viasd search``'s, and ``viasd tune`` overrides only named fields."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.config import DEFAULTS, BOConfig, CalibrationConfig, GuidedConfig, SearchConfig

#: ``viasd search`` option -> field of :class:`SearchConfig` (``calibration.x``: of its CalibrationConfig).
CLI_FIELDS = {
    "ratio": "ratio", "space": "space", "slim_cost": "slim_cost", "price": "price",
    "escalation_rate": "escalation_rate", "cycle_cost": "cycle_cost", "strategy": "strategy", "steps": "steps",
    "bo_every": "bo_every", "patience": "patience", "seed": "seed", "objective": "objective",
    "compare_random": "compare_random", "calib_prompts": "calibration.n_calibration",
    "heldout_prompts": "calibration.n_heldout", "new_tokens": "calibration.new_tokens",
    "prompt_tokens": "calibration.max_prompt_tokens", "calib_continuation": "calibration.continuation",
    "calib_file": "calibration.calib_file", "calib_pairs": "calibration.pairs_file", "chat": "calibration.chat",
}
#: Fields no option sets: the strategies' internals, and the tuner's choice of prompts for a chat target.
NOT_OPTIONS = {"guided", "bo", "calibration.spec_bench_for_chat"}


def default_of(path: str):
    value = DEFAULTS
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_every_search_option_defaults_to_the_config():
    from viasd_adapt.cli.search import search

    params = {p.name: p for p in search.params}
    for option, path in CLI_FIELDS.items():
        assert params[option].default == default_of(path), f"--{option.replace('_', '-')} vs SearchConfig.{path}"
    # and every other field of the config, and of its calibration, is set by some option
    covered = set(CLI_FIELDS.values()) | NOT_OPTIONS
    assert {path for path in covered if "." not in path} | {"calibration"} == {f.name for f in fields(SearchConfig)}
    assert {path.split(".")[1] for path in covered if path.startswith("calibration.")} == {
        f.name for f in fields(CalibrationConfig)}


def test_tune_overrides_only_the_fields_it_names(monkeypatch):
    import viasd_adapt.search.pipeline as pipeline
    from viasd_adapt.tuning import tune

    seen = []

    def fake_search_pair(target, draft, tokenizer, config, **kwargs):
        seen.append(config)
        return SimpleNamespace(artifact="the artifact")

    monkeypatch.setattr(pipeline, "search_pair", fake_search_pair)
    pair = SimpleNamespace(target="t", draft="d", tokenizer="tok")
    assert tune._search(pair, 0.4, 30) == "the artifact"
    config = seen[0]
    changed = {f.name for f in fields(SearchConfig) if getattr(config, f.name) != getattr(DEFAULTS, f.name)}
    assert changed == {"strategy", "ratio", "steps", "patience", "calibration"}
    assert (config.strategy, config.ratio, config.steps, config.patience) == ("dimr", 0.4, 30, 10)
    spec, default_spec = config.calibration, DEFAULTS.calibration
    changed = {f.name for f in fields(spec) if getattr(spec, f.name) != getattr(default_spec, f.name)}
    assert changed == {"n_calibration", "n_heldout", "new_tokens", "chat", "spec_bench_for_chat"}
    assert (spec.chat, spec.spec_bench_for_chat) == ("off", False)  # stdlib snippets as plain text, as always
    assert config.strategy_record() == {"steps": 30, "bo_every": DEFAULTS.bo_every, "patience": 10, "seed": 0,
                                        "min_observations": 2}


def test_config_resolves_strategy_and_space():
    dimr = SearchConfig(strategy="dimr")
    assert dimr.steps_for(30) == 120 == dimr.strategy_record()["steps"]
    guided = DEFAULTS.strategy_record()
    assert guided["steps"] == 0 and guided["patience"] == DEFAULTS.patience and guided["probe"] is True
    assert set(guided) == {"steps", "seed", "patience"} | {f.name for f in fields(GuidedConfig)}
    assert DEFAULTS.mask_space(10).describe() == {"space": "ratio", "num_layers": 10, "skipped": 4, "ratio": 0.4}
    budget = SearchConfig(space="budget", price="marginal", slim_cost=0.3).mask_space(10).describe()
    assert budget["price"] == "marginal" and budget["max_marginal_layers"] == 3
    assert DEFAULTS.total_steps(30) == 90 and SearchConfig(strategy="dimr", steps=7).total_steps(30) == 7
    assert DEFAULTS.steps_for(30, strategy="dimr") == 120 and dimr.steps_for(16, "guided") == 55
    assert not DEFAULTS.drafter_term and SearchConfig(objective="routed").drafter_term
    assert DEFAULTS.objective == "auto" and DEFAULTS.objective_kind() == "margin"
    assert SearchConfig(objective="q-only").objective_kind() == "q-only"
    assert DEFAULTS.random_seed == DEFAULTS.with_(seed=3).random_seed - 3


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "bayes"}, "strategy must be one of"),
    ({"steps": -1}, "steps must be >= 0"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"ratio": 1.0}, r"ratio .* must be in \(0, 1\), got 1.0"),
    ({"calibration": CalibrationConfig(n_calibration=0)}, "calibration n_calibration must be >= 1"),
    ({"calibration": CalibrationConfig(chat="maybe")}, "calibration chat must be one of"),
    ({"calibration": CalibrationConfig(continuation="teacher")}, "calibration continuation must be one of"),
    ({"guided": GuidedConfig(max_radius=0)}, "guided max_radius must be >= 1"),
    ({"guided": GuidedConfig(gp="yes")}, "guided gp must be True or False"),
    ({"guided": GuidedConfig(kappa=float("inf"))}, "guided kappa must be a finite number"),
    ({"bo": BOConfig(chunk=0)}, "bo chunk must be >= 1"),
    ({"calibration": {"n_calibration": 4}}, "calibration must be a CalibrationConfig"),
])
def test_bad_configs_are_refused_by_field(changes, message):
    """One check for the whole config, its parts included, when it is made (and made again)."""
    with pytest.raises(ConfigError, match=message):
        SearchConfig(**changes)
    with pytest.raises(ConfigError, match=message):
        DEFAULTS.with_(**changes)


def test_bad_numbers_are_refused_before_any_model_runs():
    with pytest.raises(ConfigError, match="ratio"):
        SearchConfig(ratio=1.5).mask_space(10)
    with pytest.raises(ConfigError, match="raise --cycle-cost"):
        SearchConfig(space="budget", cycle_cost=0.1, escalation_rate=1.0).mask_space(6)
    with pytest.raises(ConfigError, match="cycle_cost"):
        SearchConfig(cycle_cost=float("nan"))


def test_the_cli_imports_no_torch_for_its_defaults():
    import subprocess
    import sys

    code = "import sys, viasd_adapt.cli.search; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
