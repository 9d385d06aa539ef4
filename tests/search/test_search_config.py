"""One search config: its defaults are ``viasd search``'s, and ``viasd tune`` overrides only named fields."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.config import DEFAULTS, SearchConfig

#: ``viasd search`` option -> field of :class:`SearchConfig` (``calibration.x``: of its CalibrationSpec).
CLI_FIELDS = {
    "ratio": "ratio", "space": "space", "slim_cost": "slim_cost", "price": "price",
    "escalation_rate": "escalation_rate", "cycle_cost": "cycle_cost", "strategy": "strategy", "steps": "steps",
    "bo_every": "bo_every", "patience": "patience", "seed": "seed", "objective": "objective",
    "compare_random": "compare_random", "calib_prompts": "calibration.n_calibration",
    "heldout_prompts": "calibration.n_heldout", "new_tokens": "calibration.new_tokens",
    "prompt_tokens": "calibration.max_prompt_tokens", "calib_continuation": "calibration.continuation",
    "calib_file": "calibration.calib_file", "calib_pairs": "calibration.pairs_file",
}


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
    # and every field of the config is set by some option (the calibration's are checked one by one above)
    covered = {path for path in CLI_FIELDS.values() if "." not in path} | {"calibration"}
    assert covered == {f.name for f in fields(SearchConfig)}


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
    assert changed == {"n_calibration", "n_heldout", "new_tokens", "spec_bench_for_chat"}
    settings = config.strategy_settings()
    assert (settings.steps, settings.bo_every, settings.patience, settings.seed) == (30, DEFAULTS.bo_every, 10, 0)


def test_config_resolves_strategy_and_space():
    assert SearchConfig(strategy="dimr").strategy_settings().steps == 120
    guided = DEFAULTS.strategy_settings()
    assert type(guided).__name__ == "GuidedSettings" and guided.patience == DEFAULTS.patience
    assert DEFAULTS.mask_space(10).describe() == {"space": "ratio", "num_layers": 10, "skipped": 4, "ratio": 0.4}
    budget = SearchConfig(space="budget", price="marginal", slim_cost=0.3).mask_space(10).describe()
    assert budget["price"] == "marginal" and budget["max_marginal_layers"] == 3
    assert DEFAULTS.total_steps(30) == 90 and SearchConfig(strategy="dimr", steps=7).total_steps(30) == 7
    assert not DEFAULTS.drafter_term() and not DEFAULTS.drafter_term(prompt_lookup=True)
    assert SearchConfig(objective="routed").drafter_term(prompt_lookup=True)
    assert DEFAULTS.objective == "auto" and DEFAULTS.objective_kind() == DEFAULTS.objective_kind(prompt_lookup=True) == "margin"
    assert SearchConfig(objective="q-only").objective_kind() == "q-only"


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "bayes"}, "strategy must be one of"),
    ({"steps": -1}, "steps must be >= 0"),
    ({"seed": 1.5}, "seed must be an integer"),
])
def test_bad_configs_are_refused_by_field(changes, message):
    with pytest.raises(ConfigError, match=message):
        SearchConfig(**changes)


def test_bad_numbers_are_refused_before_any_model_runs():
    with pytest.raises(ConfigError, match="ratio"):
        SearchConfig(ratio=1.5).mask_space(10)
    with pytest.raises(ConfigError, match="raise --cycle-cost"):
        SearchConfig(space="budget", cycle_cost=0.1, escalation_rate=1.0).mask_space(6)
    with pytest.raises(ConfigError, match="cycle_cost"):
        SearchConfig(cycle_cost=float("nan")).strategy_settings()


def test_the_cli_imports_no_torch_for_its_defaults():
    import subprocess
    import sys

    code = "import sys, viasd_adapt.cli.search; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
