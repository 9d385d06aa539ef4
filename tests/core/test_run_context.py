"""One run context: what a run uses is decided once and held in one immutable object.

* two runs with different settings on one pair, interleaved in two threads, each run their own
  settings (the pair is immutable and holds no run's state);
* the mask and tuned files are read once per run, ``hf.tiered(pair)`` included;
* the resolver is pure (its notices are values) and the edge gives them as warnings naming the
  user's line;
* the verify step is built by the context, and ``TieredVerifier`` refuses what would disagree with it.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from pathlib import Path

import pytest
import torch

import viasd_adapt
from tests.support.loads import count_loads
from tests.support.pairs import truncated_pair
from tests.support.tuned import CPU_STAMP
from viasd_adapt.config.advice import NegativeDeltaWarning
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.context import open_context, resolve_context
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair, MaskInfo
from viasd_adapt.routing.mask import model_fingerprint

PROMPT = [5, 17, 2, 40, 9]


def _tiny_pair() -> LoadedPair:
    tiny = truncated_pair("llama", layers=4, sharpness=8.0)
    for model in (tiny.target, tiny.drafter):
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    return LoadedPair(tiny.target, tiny.drafter, None, MaskInfo(tiny.mask, "test mask", False), torch.device("cpu"))


class _SettingsSeen:
    """Records the settings each gate-1 decision of this thread's run is made with (the rule hook's
    ``settings`` argument), and meets the other thread's run at its first decision, so that the two
    runs are inside their loops at the same time."""

    def __init__(self, meeting: threading.Barrier):
        self.meeting, self.seen = meeting, []

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        if not self.seen:
            self.meeting.wait(timeout=60)
        self.seen.append(settings)


def _interleaved_runs(framework: str, pair: LoadedPair, settings: list[TierSettings], shared_context: bool = False):
    """Runs ``settings[i]`` in thread i on ``pair``; returns what each thread's decisions saw."""
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest

    # the runs meet inside their loops; a shared context has one recorder, which meets no one
    meeting = threading.Barrier(1 if shared_context else len(settings))
    seen = [_SettingsSeen(meeting) for _ in settings]
    contexts = [pair.run_context(s, [recorder]) for s, recorder in zip(settings, seen)]
    if shared_context:  # the control: every run handed the first run's context, as a shared side channel would
        contexts = [contexts[0]] * len(settings)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            request = RunRequest.tiered(PROMPT, 12, contexts[i].settings, stop_at_eos=False, context=contexts[i])
            frameworks.run(framework, pair, request)
        except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(settings))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [recorder.seen for recorder in seen]


@pytest.mark.parametrize("framework", ["engine", "hf"])
def test_two_runs_with_different_settings_on_one_pair_in_two_threads_each_run_their_own(framework):
    pair = _tiny_pair()
    first = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, gamma=3, adaptive=False)
    second = TierSettings(mode="lossy", alpha1=0.7, alpha2=0.4, gamma=4, adaptive=False)
    seen_first, seen_second = _interleaved_runs(framework, pair, [first, second])
    assert seen_first and seen_second
    assert {s for s in seen_first} == {first} and {s for s in seen_second} == {second}
    # the pair is as it was: nothing of either run was written on it
    assert pair.mask.mask == truncated_pair("llama", layers=4, sharpness=8.0).mask and pair.files.tuned is None


def test_the_threads_check_sees_a_shared_context():
    """Control: runs that share one context (what a side channel on the pair amounts to) are caught."""
    pair = _tiny_pair()
    first = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, gamma=3, adaptive=False)
    second = TierSettings(mode="lossy", alpha1=0.7, alpha2=0.4, gamma=4, adaptive=False)
    with pytest.raises(AssertionError):  # the recorder registered in the second context never hears anything
        seen = _interleaved_runs("engine", pair, [first, second], shared_context=True)
        assert {s for s in seen[1]} == {second}


def test_a_loaded_pair_is_immutable_and_holds_no_side_channel():
    pair = _tiny_pair()
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.mask = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.mask.source = "another"  # type: ignore[misc]
    assert "loaded" not in {f.name for f in dataclasses.fields(pair)} and getattr(pair, "loaded", None) is None


def test_the_run_context_is_immutable():
    pair = _tiny_pair()
    context = pair.run_context(TierSettings(mode="lossy"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.settings = TierSettings()  # type: ignore[misc]


# ----------------------------------------------------------------------------- read once


def test_a_named_pair_reads_its_mask_and_tuned_file_once_for_every_run_on_it(monkeypatch):
    """``load_pair("demo")`` reads mask.json and tuned.json once; ``hf.tiered(pair)``, a framework
    run and a call with another drafter read neither again. Control: ``hf.tiered`` given the mask
    *path* reads both again (the counter counts)."""
    from tests.support.pairs import noisy_copy
    from viasd_adapt.adapters import hf
    from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.models.pair import load_pair

    mask_reads = count_loads(monkeypatch, MaskArtifact)
    tuned_reads = count_loads(monkeypatch, TunedSettings)
    pair = load_pair("demo", device="cpu")
    assert len(mask_reads) == 1 and len(tuned_reads) == 1, (mask_reads, tuned_reads)
    ids = pair.tokenizer("def add(a, b):", return_tensors="pt").input_ids

    with hf.tiered(pair) as session:  # the pair's tuned choice (lenient on the demo pair)
        pair.target.generate(ids, assistant_model=pair.draft, max_new_tokens=4, do_sample=False)
        assert session.settings == pair.settings
        other = noisy_copy(pair.draft, 0.02, seed=11)
        with pytest.warns(TunedForAnotherDrafterWarning), pytest.warns(NegativeDeltaWarning):
            pair.target.generate(ids, assistant_model=other, max_new_tokens=4, do_sample=False)
    frameworks.run("hf", pair, RunRequest.tiered(ids[0].tolist(), 4, TierSettings(mode="lossless")))
    assert len(mask_reads) == 1 and len(tuned_reads) == 1, (mask_reads, tuned_reads)

    # control: the same session opened from the mask's path reads both files again
    with hf.tiered(pair.target, context=viasd_adapt.context(pair.target, mask=pair.mask_path)):
        pass
    assert len(mask_reads) == 2 and len(tuned_reads) == 2


def test_viasd_generate_reads_the_mask_and_tuned_file_once(monkeypatch):
    from click.testing import CliRunner

    from viasd_adapt.cli.generate import generate

    mask_reads = count_loads(monkeypatch, MaskArtifact)
    tuned_reads = count_loads(monkeypatch, TunedSettings)
    # a mode without a slim verifier needs no mask (not read at all); one with a slim verifier reads it once
    for mode, reads in (("lenient", (0, 1)), ("lossless", (1, 1))):
        before = len(mask_reads), len(tuned_reads)
        result = CliRunner().invoke(generate, ["--pair", "demo", "--mode", mode, "--prompt", "def add(a, b):",
                                               "--max-new-tokens", "4", "--no-show-tiers"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert (len(mask_reads) - before[0], len(tuned_reads) - before[1]) == reads, (mode, mask_reads, tuned_reads)


# ----------------------------------------------------------------------------- the resolver and the edge


def _mask_with_negative_delta(target, folder: Path, mask) -> Path:
    return MaskArtifact(mask, delta=-4.0, fingerprint=model_fingerprint(target)).save(folder / "mask.json")


def test_the_resolver_returns_notices_and_the_edge_gives_them_naming_the_callers_line(tmp_path):
    tiny = truncated_pair("llama", layers=4)
    artifact = MaskArtifact.load(_mask_with_negative_delta(tiny.target, tmp_path, tiny.mask))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the resolver warns nothing
        context = resolve_context(tiny.target, TierSettings(mode="lossy"), mask=artifact)
    assert [n.category for n in context.notices] == [NegativeDeltaWarning]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        open_context(tiny.target, tmp_path / "mask.json", TierSettings(mode="lossy"))
    assert [(w.category, w.filename) for w in caught] == [(NegativeDeltaWarning, __file__)]
    # control: a mode the Delta rule does not concern has nothing to say
    assert resolve_context(tiny.target, TierSettings(mode="lossless"), mask=artifact).notices == ()


def test_for_drafter_runs_the_defaults_for_another_drafter_without_reading_anything(tmp_path, monkeypatch):
    from tests.support.pairs import noisy_copy
    from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning

    tiny = truncated_pair("llama", layers=4)
    mask_path = _mask_with_negative_delta(tiny.target, tmp_path, tiny.mask)
    chosen = TierSettings(mode="lenient", lenience=0.3)
    TunedSettings(chosen, "lenient", tiny.mask.bits(), model_fingerprint(tiny.target),
                  drafter=model_fingerprint(tiny.drafter), hardware=CPU_STAMP).save(tmp_path / "tuned.json")
    context = open_context(tiny.target, mask_path)
    assert context.settings == chosen and context.runs_tuned and context.routing is None
    reads = count_loads(monkeypatch, MaskArtifact) + count_loads(monkeypatch, TunedSettings)
    own = context.for_drafter(tiny.drafter)
    assert own.settings == chosen and own.notices == ()
    other = context.for_drafter(noisy_copy(tiny.drafter, 0.5, seed=3))
    assert other.settings == TierSettings() and other.routing == tiny.mask and other.slim is not None
    assert {n.category for n in other.notices} == {TunedForAnotherDrafterWarning, NegativeDeltaWarning}
    assert other.spec.not_applied.startswith("measured with another drafter")
    assert reads == [] and context.settings == chosen  # nothing read, and the first context unchanged


# ----------------------------------------------------------------------------- one builder of the verify step


def test_the_verify_step_is_the_contexts_and_the_verifier_refuses_what_would_disagree():
    tiny = truncated_pair("llama", layers=4)
    settings = TierSettings(mode="lossy", gamma=3, adaptive=False)
    context = resolve_context(tiny.target, settings, mask=tiny.mask)
    step = context.verify_step("engine")
    assert step.settings == settings and step.plugin_manager is context.plugin_manager
    verifier = TieredVerifier.of(context, step, SamplingConfig())
    assert verifier.settings == settings and verifier.step is step
    assert TieredVerifier(tiny.target, settings, SamplingConfig(), slim=context.slim, step=step).step is step  # control
    with pytest.raises(ConfigError, match="settings that are not its verify step's"):
        TieredVerifier(tiny.target, settings.with_(alpha1=0.9), SamplingConfig(), slim=context.slim, step=step)
    with pytest.raises(ConfigError, match="plugin manager that is not its verify step's"):
        TieredVerifier(tiny.target, None, SamplingConfig(), slim=context.slim, step=step,
                       plugin_manager=resolve_context(tiny.target, settings, mask=tiny.mask).plugin_manager)


def test_a_request_whose_settings_disagree_with_its_context_is_refused():
    from viasd_adapt.frameworks.requests import RunRequest

    pair = _tiny_pair()
    context = pair.run_context(TierSettings(mode="lossless"))
    RunRequest.tiered(PROMPT, 4, TierSettings(mode="lossless"), context=context)  # control: they agree
    with pytest.raises(ConfigError, match="disagree"):
        RunRequest.tiered(PROMPT, 4, TierSettings(mode="lossy"), context=context)


def _side_channel_lines(root: Path) -> list[str]:
    """Lines of the package's sources that index a ``loaded`` mapping (the old side channel)."""
    return [f"{path}:{n}" for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "loaded[" in line]


def test_no_source_indexes_a_loaded_side_channel(tmp_path):
    repository = Path(__file__).resolve().parents[2]
    assert _side_channel_lines(repository / "viasd_adapt") == [] and _side_channel_lines(repository / "adapters") == []
    (tmp_path / "old.py").write_text('pair.loaded["tuned"] = None\n')  # control: the scan finds one
    assert _side_channel_lines(tmp_path) == [f"{tmp_path / 'old.py'}:1"]


def test_viasd_generates_context_keeps_where_each_setting_came_from():
    """The CLI's request carries the plan's resolution: each setting with its source (control: a
    context built from given settings says "given")."""
    from viasd_adapt.cli.generate import pair_choice, run_options
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.frameworks.planning import plan_run

    options = run_options("lossy", None, 0.3, None, None, None, "default", None, "auto", None, None, 0, SamplingConfig())
    planned = plan_run(pair_choice("demo", None, None, None), options, "engine")
    request = planned.request(PROMPT, 4)
    assert str(request.context.sources["alpha1"]) == "flag --alpha1" and request.context.settings.alpha1 == 0.3
    assert str(request.context.sources["mode"]) == "flag --mode"
    assert str(planned.context(request.settings).sources["alpha1"]) == "given"
