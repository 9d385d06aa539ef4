"""One planner: every command sets its run up through ``plan_run`` and nothing else.

* each command (generate, bench, demo, tune, models add) calls the planner once, and loads no pair
  outside it (control: a command that loads its pair itself is caught by the same check);
* ``--lenience`` and ``--adaptive`` reach the run's settings, as typed options, never through a
  ``**`` catch-all (control: a function with one is flagged);
* the drafter is checked once per run (control: the path before the planner checked it again);
* each notice is given once (control: giving the plan's notices again is counted twice).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass, fields

import click
import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning
from viasd_adapt.engine import context as context_module
from viasd_adapt.frameworks import planning
from viasd_adapt.models import pair as pair_module

PROMPT = ["--prompt", "def add(a, b):", "--max-new-tokens", "4", "--no-show-tiers"]
TINY_BENCH = ["--pair", "demo", "--frameworks", "hf", "--modes", "none,lossless", "--num-prompts", "1", "--max-new-tokens",
              "4", "--repeats", "1", "--task-prompts", "0"]


class _Stop(Exception):
    """Raised by a spy that has seen what it needed: the command's heavy work after set-up is not run."""


@dataclass
class SetUpRoute:
    """How a command set its run up: the planner's calls (their options and frameworks), and the
    pairs loaded outside it."""

    plans: list
    loads_outside: list


@contextlib.contextmanager
def set_up_route(monkeypatch: pytest.MonkeyPatch, stop_after_plan: bool = False):
    """Spies on :func:`planning.plan_run` and on ``models.pair.load_pair`` as a command looks it up
    (the planner holds its own reference: its loads are not counted). ``stop_after_plan``: the
    planner's work is done, then the command stops (a long command: tune, models add)."""
    route = SetUpRoute([], [])
    real_plan = planning.plan_run

    def plan_spy(choice, options, framework=None, **kwargs):
        route.plans.append((options, framework))
        planned = real_plan(choice, options, framework, **kwargs)
        if stop_after_plan:
            raise _Stop
        return planned

    def load_spy(*args, **kwargs):
        route.loads_outside.append(args[:1])
        raise _Stop  # a pair loaded by the command itself: the run was set up around the planner

    monkeypatch.setattr(planning, "plan_run", plan_spy)
    monkeypatch.setattr(pair_module, "load_pair", load_spy)
    yield route


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_generate_sets_its_run_up_through_the_planner_once(monkeypatch):
    with set_up_route(monkeypatch) as route:
        result = invoke("generate", "--pair", "demo", "--framework", "engine", "--mode", "lossless", *PROMPT)
    assert result.exit_code == 0, result.output
    assert len(route.plans) == 1 and route.plans[0][1] == "engine" and not route.loads_outside


def test_bench_sets_its_run_up_through_the_planner_once(monkeypatch):
    with set_up_route(monkeypatch) as route:
        result = invoke("bench", *TINY_BENCH)
    assert result.exit_code == 0, result.output
    assert "verdict" in result.output
    assert len(route.plans) == 1 and tuple(route.plans[0][1]) == ("hf",) and not route.loads_outside
    assert route.plans[0][0].best_points  # the bench's rows run the tuner's best points


def test_demo_sets_its_run_up_through_the_planner(monkeypatch):
    from viasd_adapt.bench.demo import BUDGETS, run_demo

    with set_up_route(monkeypatch, stop_after_plan=True) as route, pytest.raises(_Stop):
        run_demo(pair="demo", budget=BUDGETS["tiny"], echo=lambda line: None, write=lambda text: None, progress=False)
    assert len(route.plans) == 1 and not route.loads_outside


@pytest.mark.parametrize("command", [
    ["tune", "--pair", "demo", "--alpha1", "0.5", "--alpha2", "0.3", "--lenience", "0.6", "--max-new-tokens", "4"],
    ["models", "add", "mine", "--target", "{target}", "--draft", "prompt-lookup", "--minutes", "5", "--no-progress"],
])
def test_tune_and_models_add_load_their_pair_through_the_planner(monkeypatch, tmp_path, command):
    from viasd_adapt.models.registry import resolve_pair

    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "cache"))
    target = str(resolve_pair("demo").target)
    args = [part.replace("{target}", target) for part in command]
    if args[0] == "tune":
        args += ["--out", str(tmp_path / "tuned.json")]
    with set_up_route(monkeypatch, stop_after_plan=True) as route:
        result = invoke(*args)
    assert isinstance(result.exception, _Stop), result.output
    assert len(route.plans) == 1 and not route.loads_outside
    assert route.plans[0][0].read_tuned is False  # both write tuned.json: neither reads one


def test_a_command_that_loads_its_own_pair_is_caught(monkeypatch):
    """Control: the same check on a command that sets its run up around the planner."""

    @click.command()
    def bypass() -> None:
        from viasd_adapt.models.pair import load_pair
        from viasd_adapt.models.registry import resolve_pair

        paths = resolve_pair("demo")
        load_pair(paths.target, paths.draft, paths.mask)

    with set_up_route(monkeypatch) as route:
        result = CliRunner().invoke(bypass, [])
    assert isinstance(result.exception, _Stop)
    assert route.plans == [] and len(route.loads_outside) == 1


# ----------------------------------------------------------------------------- the flags reach the settings


def _explained(*args: str) -> dict[str, tuple[str, str]]:
    """``--explain``'s table: setting -> (value, source)."""
    result = invoke("generate", "--pair", "demo", "--explain", *args, *PROMPT)
    assert result.exit_code == 0, result.output
    table = {}
    for line in result.output.splitlines():
        parts = line.split(None, 2)
        if line.startswith("  ") and len(parts) == 3:
            table[parts[0]] = (parts[1], parts[2])
    return table


def test_lenience_and_adaptive_typed_on_generate_reach_the_runs_settings(monkeypatch):
    seen = []
    real_run = __import__("viasd_adapt.frameworks.registry", fromlist=["run"]).run

    def run_spy(name, pair, request):
        seen.append(request)
        return real_run(name, pair, request)

    monkeypatch.setattr("viasd_adapt.frameworks.registry.run", run_spy)
    lenient = _explained("--framework", "engine", "--mode", "lenient", "--lenience", "0.3")
    assert lenient["lenience"] == ("0.3", "flag --lenience")
    assert seen[-1].context.settings.lenience == 0.3 and str(seen[-1].context.sources["lenience"]) == "flag --lenience"
    fixed = _explained("--framework", "engine", "--mode", "lossless", "--no-adaptive")
    assert fixed["adaptive"] == ("False", "flag --adaptive")
    assert seen[-1].context.settings.adaptive is False and seen[-1].context.plan is None
    # control: without the flags the run keeps the tuned or default values, from their own sources
    plain = _explained("--framework", "engine", "--mode", "lossless")
    assert plain["adaptive"][1] != "flag --adaptive" and seen[-1].context.settings.adaptive is True


def catch_alls(functions) -> list[str]:
    """The functions among ``functions`` that take a ``**`` parameter (where a flag could be lost)."""
    return [f.__qualname__ for f in functions
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(f).parameters.values())]


def test_the_flags_path_from_generate_to_the_planner_has_no_catch_all():
    from viasd_adapt.cli.generate import generate, run_options

    path = [generate.callback, run_options, planning.plan_run, planning.RunOptions, planning._resolve]
    assert catch_alls(path) == []
    assert {"lenience", "adaptive", "alpha1", "alpha2", "mode", "preset", "mask"} <= {f.name for f in fields(planning.RunOptions)}

    def resolve_run(framework, target, draft, mask, eagle_head, pair=None, preset="default", **flags):  # the old shape
        return flags

    assert catch_alls([run_options, resolve_run]) == ["test_the_flags_path_from_generate_to_the_planner_has_no_catch_all"
                                                      ".<locals>.resolve_run"]  # control: it is found


# ----------------------------------------------------------------------------- the drafter is checked once


def _count_drafter_checks(monkeypatch) -> list:
    checks = []
    real = context_module.tuned_drafter_mismatch

    def spy(tuned, drafter):
        checks.append(drafter)
        return real(tuned, drafter)

    monkeypatch.setattr(context_module, "tuned_drafter_mismatch", spy)
    return checks


@pytest.mark.parametrize("framework", ["hf", "engine", "pearl"])
def test_generate_checks_the_drafter_once(monkeypatch, framework):
    checks = _count_drafter_checks(monkeypatch)
    result = invoke("generate", "--pair", "demo", "--framework", framework, *PROMPT)
    assert result.exit_code == 0, result.output
    assert len(checks) == 1, checks


def test_the_drafter_check_count_sees_a_second_check(monkeypatch):
    """Control: the set-up before the planner (the pair's context for the drafter, then HF's per-call
    context for its block-length view of it) checked the drafter again, and the spy counts it."""
    import copy

    from viasd_adapt.models.pair import load_named_pair

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pair = load_named_pair("demo")
    checks = _count_drafter_checks(monkeypatch)
    context = pair.run_context(None, drafter=pair.draft)
    context.for_drafter(copy.deepcopy(pair.draft))  # another model object: checked again
    assert len(checks) == 2


# ----------------------------------------------------------------------------- notices once


def test_generate_gives_each_notice_once():
    """The demo pair's tuned file was measured with its drafter model: drafting with prompt lookup
    sets it aside, and the user hears it once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke("generate", "--pair", "demo", "--draft", "prompt-lookup", "--framework", "hf", *PROMPT)
    assert result.exit_code == 0, result.output
    assert [w.category for w in caught].count(TunedForAnotherDrafterWarning) == 1


def test_a_plans_notices_are_given_once_and_a_second_giving_is_counted():
    from viasd_adapt.cli.generate import pair_choice, run_options
    from viasd_adapt.core.notices import emit
    from viasd_adapt.core.sampling import SamplingConfig

    options = run_options(None, None, None, None, None, None, "default", None, "auto", None, None, 0, SamplingConfig())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        planned = planning.plan_run(pair_choice("demo", None, "prompt-lookup", None), options, "engine")
        planned.request([1, 2, 3], 4)  # a request's context gives nothing the plan gave
    assert [w.category for w in caught].count(TunedForAnotherDrafterWarning) == 1
    assert [n.category for n in planned.notices] == [TunedForAnotherDrafterWarning]
    with warnings.catch_warnings(record=True) as again:  # control: given twice, counted twice
        warnings.simplefilter("always")
        emit(planned.notices)
        emit(planned.notices)
    assert [w.category for w in again].count(TunedForAnotherDrafterWarning) == 2


def test_bench_checks_the_drafter_once_and_gives_its_notice_once(monkeypatch):
    """Every row of a bench runs with the plan's check: drafting with prompt lookup sets the demo
    pair's tuned file aside once, and the user hears it once, whatever the number of rows and prompts."""
    checks = _count_drafter_checks(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke("bench", *TINY_BENCH, "--draft", "prompt-lookup")
    assert result.exit_code == 0, result.output
    assert len(checks) == 1, checks
    assert [w.category for w in caught].count(TunedForAnotherDrafterWarning) == 1


# ----------------------------------------------------------------------------- no process-wide cache of pairs


def process_wide_caches(source: str) -> list[int]:
    """Lines of ``source`` that keep models or pairs beside them for the whole process: a weak map
    keyed by model (what EAGLE's EaModel once lived in) or the old ``loaded_for`` helper."""
    return [number for number, line in enumerate(source.splitlines(), 1)
            if "WeakKeyDictionary" in line or "loaded_for(" in line]


def test_no_module_keeps_a_process_wide_cache_of_pairs():
    from tests.support import REPO_ROOT

    found = [f"{path.relative_to(REPO_ROOT)}:{line}" for root in ("viasd_adapt", "adapters")
             for path in sorted((REPO_ROOT / root).rglob("*.py")) if "adapters" not in path.relative_to(REPO_ROOT / root).parts
             for line in process_wide_caches(path.read_text())]
    assert found == []
    # control: the 0.2 hand-over's old home is found
    assert process_wide_caches("_LOADED_FOR = weakref.WeakKeyDictionary()\nloaded_for(target, key, load)\n") == [1, 2]


def test_the_pair_holds_what_a_framework_loaded_for_it(monkeypatch):
    """EAGLE's runner takes the EaModel the pair holds (the planner loads it once per run), nothing
    kept beside the pair: a second pair of the same target does not see it."""
    import torch

    from tests.support.pairs import truncated_pair
    from viasd_adapt.adapters.eagle import compat
    from viasd_adapt.models.pair import LoadedPair

    tiny = truncated_pair("llama", layers=4)
    held = object()
    pair = LoadedPair(tiny.target, None, None, None, torch.device("cpu"), eagle_head="head", framework_models={"eagle": held})
    assert compat.load_for_pair(pair) is held
    loads = []
    monkeypatch.setattr(compat, "load_ea_model", lambda *args, **kwargs: loads.append(args) or "loaded now")
    other = LoadedPair(tiny.target, None, None, None, torch.device("cpu"), eagle_head="head")
    assert compat.load_for_pair(other) == "loaded now" and len(loads) == 1  # control: nothing was kept for the target
