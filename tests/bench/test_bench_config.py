"""The bench invocation's one config (``BenchConfig``) and the pure steps of ``run_bench_session``.

Everything here runs without a model: a config is checked when it is built, so a bad option fails
before any model loads, and the lines and records the bench prints and writes are functions of
values.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from viasd_adapt.bench.run import DEFAULT_MODES, RunPlan
from viasd_adapt.bench.session import BenchConfig, command_line, run_info, setup_lines
from viasd_adapt.config.budget import Budget
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.errors import ConfigError

MISSING = "/no/such/model"  # a config never touches its paths: nothing is loaded until the run


def test_the_options_become_one_checked_config_with_its_run_plan_budget_and_sampling():
    config = BenchConfig(MISSING, MISSING, frameworks="hf, pearl", modes="none,lossy", max_new_tokens=7, repeats=2,
                         seed=5, cost_repeats=3, max_ll_drop=0.01, max_regret=0.03, max_overrule=0.2, temperature=0.7)
    assert config.frameworks == ("hf", "pearl") and config.modes == ("none", "lossy")
    assert config.plan == RunPlan(frameworks=("hf", "pearl"), modes=("none", "lossy"), max_new_tokens=7, repeats=2, seed=5,
                                  cost_repeats=3, stop_at_eos=False)
    assert config.budget == Budget(0.01, 0.2, 0.03)
    assert not config.sampling.greedy and config.sampling.temperature == 0.7
    assert config.needs_mask and not BenchConfig(MISSING, MISSING, modes=("none", "lenient")).needs_mask
    assert config.threshold_flags == {"alpha1": None, "alpha2": None, "lenience": None, "gamma": None}
    assert BenchConfig(MISSING, MISSING).modes == DEFAULT_MODES


def test_spec_bench_prompts_stop_at_eos_and_skip_the_next_line_task():
    config = BenchConfig(MISSING, "prompt-lookup", prompts_file="spec-bench:qa", per_category=3, task_prompts=32)
    assert config.spec_bench and config.plan.stop_at_eos
    assert config.questions_per_task == 3 and config.task_examples == 0
    plain = BenchConfig(MISSING, MISSING, task_prompts=4)
    assert plain.questions_per_task is None and plain.task_examples == 4 and not plain.plan.stop_at_eos
    assert plain.prompts_source == "held-out stdlib snippets"
    assert BenchConfig(MISSING, MISSING, prompts_file="spec-bench").questions_per_task == 2  # the default per task


@pytest.mark.parametrize(("options", "message"), [
    ({"per_category": 2}, "--per-category is for --prompts spec-bench"),
    ({"frameworks": "hf,vllm"}, "unknown framework 'vllm'"),
    ({"modes": "none,fast"}, r"unknown mode\(s\) \['fast'\]"),
    ({"frameworks": ""}, "nothing to run"),
    ({"repeats": 0}, "repeats must be >= 1"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
    ({"num_prompts": 0}, "num_prompts must be >= 1"),
    ({"task_prompts": -1}, "task_prompts must be >= 0"),
    ({"max_ll_drop": -0.1}, "max_ll_drop must be >= 0"),
    ({"max_overrule": 1.5}, "max_overrule must be <= 1"),
    ({"temperature": float("nan")}, "temperature must be a finite number"),
])
def test_a_bad_option_is_refused_when_the_config_is_built(options, message):
    with pytest.raises(ConfigError, match=message):
        BenchConfig(MISSING, MISSING, **options)


def test_the_command_line_names_the_program_without_its_folder():
    assert command_line(["/home/someone/.venv/bin/viasd", "bench", "--prompts", "my prompts.txt"]) == \
        "viasd bench --prompts 'my prompts.txt'"
    assert command_line([]) == ""


def _spec(settings=TierSettings(), tuned=None, notes=()):
    return SimpleNamespace(settings=settings, tuned=tuned, notes=list(notes))


def test_the_run_record_names_models_relative_to_the_working_folder(tmp_path):
    config = BenchConfig(tmp_path / "pairs" / "demo" / "target", "prompt-lookup", preset="conservative", label="x",
                         max_overrule=0.1, prompts_file="spec-bench", chat="on")
    pair = SimpleNamespace(mask=None)
    info = run_info(config, _spec(), pair, 6, 1, ["v"], None, ["viasd", "bench"], tmp_path)
    assert info["target"] == str(Path("pairs/demo/target")) and info["draft"] == "prompt-lookup"
    assert info["eagle_head"] is None and info["mask"] is None and info["tuned"] is None
    assert info["preset"] == "conservative" and info["max_overrule"] == 0.1 and info["per_category"] == 2
    assert info["prompts"] == 6 and info["prompts_source"] == "spec-bench" and info["verdict"] == ["v"]
    assert info["command"] == "viasd bench" and info["sampling"] == {"greedy": True, "temperature": 0.0}
    assert "max_overrule" not in run_info(BenchConfig(MISSING, MISSING), _spec(), pair, 1, 1, [], None, [], tmp_path)


def test_the_setup_lines_say_what_runs_before_it_runs():
    config = BenchConfig(MISSING, MISSING, max_new_tokens=9, repeats=2, temperature=0.5)
    pair = SimpleNamespace(mask=None, device="cpu")
    lines = setup_lines(config, _spec(notes=["tiered rows: a note"]), pair, 4, 1)
    assert lines[0] == "tiered rows: a note"
    assert lines[-1].startswith("settings: {") and "| sampling: T=0.5 | 4 prompts x 9 tokens x 2 repeats | device cpu, 1 thread(s)" \
        in lines[-1]


def test_every_bench_option_is_a_config_field_and_the_defaults_agree():
    from dataclasses import fields

    from viasd_adapt.bench.session import DEFAULT_FRAMEWORKS, split_list
    from viasd_adapt.cli import bench as command

    names = {f.name for f in fields(BenchConfig) if f.init}
    options = {p.name for p in command.bench.params} - {"target_path", "draft_path", "pair", "eagle_head"}
    assert options <= names, options - names  # the command builds BenchConfig(target, draft, **options)
    # the command keeps its defaults as strings (its --help imports no torch); they are the config's
    assert split_list(command.DEFAULT_FRAMEWORKS) == DEFAULT_FRAMEWORKS and split_list(command.DEFAULT_MODES) == DEFAULT_MODES
