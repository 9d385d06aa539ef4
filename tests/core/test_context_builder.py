"""One public builder of a run's context: ``viasd_adapt.context(target_or_pair, ...)``.

* on a model it reads the mask and tuned files as every adapter's set-up did
  (:func:`~viasd_adapt.engine.context.open_context`): the same settings, sources and evidence;
* on a pair it uses what the pair read when it loaded (no file is read again), as the pair's own
  :meth:`~viasd_adapt.models.pair.LoadedPair.run_context` does;
* it gives its notices once, naming the caller's line, and the context it returns holds none.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import viasd_adapt
from viasd_adapt.config.provenance import SourceKind
from tests.support.loads import count_loads
from tests.support.pairs import truncated_pair
from tests.support.tuned import CPU_STAMP
from viasd_adapt.config.advice import NegativeDeltaWarning
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.engine.context import (RunContext, UntieredWithoutMaskWarning, build_context, open_context,
                                        resolve_context)
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair, MaskInfo
from viasd_adapt.routing.mask import model_fingerprint

CHOSEN = TierSettings(mode="lossless", gamma=3, adaptive=False)


@pytest.fixture(scope="module")
def tiny():
    return truncated_pair("llama", layers=4, sharpness=8.0)


def _tuned_folder(tiny, folder: Path, delta: float = 0.5) -> Path:
    """A mask.json and the tuned.json measured with it (choice: :data:`CHOSEN`); the mask's path."""
    path = MaskArtifact(tiny.mask, delta=delta, fingerprint=model_fingerprint(tiny.target)).save(folder / "mask.json")
    TunedSettings(CHOSEN, "lossless-fixed", tiny.mask.bits(), model_fingerprint(tiny.target),
                  drafter=model_fingerprint(tiny.drafter), hardware=CPU_STAMP).save(folder / "tuned.json")
    return path


def _same_run(a: RunContext, b: RunContext) -> None:
    assert a.settings == b.settings and a.sources == b.sources
    assert a.routing == b.routing and (a.slim is None) == (b.slim is None)
    assert (a.evidence is None) == (b.evidence is None) and a.runs_tuned == b.runs_tuned


def test_the_package_hands_out_the_builder_and_the_context_class():
    assert viasd_adapt.context is viasd_adapt.engine.context.context
    assert viasd_adapt.RunContext is RunContext


def test_on_a_model_it_resolves_as_the_adapters_set_up_did(tiny, tmp_path):
    path = _tuned_folder(tiny, tmp_path)
    built = viasd_adapt.context(tiny.target, mask=path)
    _same_run(built, open_context(tiny.target, path))
    assert built.settings == CHOSEN and built.runs_tuned and built.sources["mode"].kind is SourceKind.TUNED
    given = viasd_adapt.context(tiny.target, mask=path, settings=TierSettings(mode="lossy"))
    _same_run(given, open_context(tiny.target, path, TierSettings(mode="lossy")))
    assert given.mode is Mode.LOSSY and not given.runs_tuned  # control: given settings are not the tuned ones


def test_on_a_pair_it_uses_what_the_pair_read_and_reads_nothing(tiny, tmp_path, monkeypatch):
    path = _tuned_folder(tiny, tmp_path)
    pair = viasd_adapt.load_pair(tiny.target, tiny.drafter, path, device="cpu", tokenizer=object())
    mask_reads, tuned_reads = count_loads(monkeypatch, MaskArtifact), count_loads(monkeypatch, TunedSettings)
    built = viasd_adapt.context(pair)
    _same_run(built, pair.run_context())
    assert built.settings == CHOSEN and built.evidence is pair.files.tuned
    lossy = viasd_adapt.context(pair, settings=TierSettings(mode="lossy"), plugins=())
    _same_run(lossy, pair.run_context(TierSettings(mode="lossy")))
    assert viasd_adapt.context(pair, tuned=None).evidence is None
    assert mask_reads == [] and tuned_reads == []
    # control: another mask than the pair's is read, as on a model
    viasd_adapt.context(pair, mask=path)
    assert len(mask_reads) == 1 and len(tuned_reads) == 1


def test_a_pair_without_files_runs_its_mask(tiny):
    pair = LoadedPair(tiny.target, tiny.drafter, None, MaskInfo(tiny.mask, "test mask", False), torch.device("cpu"))
    built = viasd_adapt.context(pair, settings=TierSettings(mode="lossy"))
    assert built.routing == tiny.mask and built.slim is not None and built.target is tiny.target


def test_its_notices_are_given_once_at_the_callers_line_and_not_kept(tiny, tmp_path):
    path = _tuned_folder(tiny, tmp_path, delta=-4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = viasd_adapt.context(tiny.target, mask=path, settings=TierSettings(mode="lossy"))
    assert [(w.category, w.filename) for w in caught] == [(NegativeDeltaWarning, __file__)]
    assert built.notices == ()
    # control: the builder's quiet form returns them for a caller that gives them at its own edge
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = build_context(tiny.target, mask=path, settings=TierSettings(mode="lossy"))
    assert [n.category for n in quiet.notices] == [NegativeDeltaWarning]


def test_with_neither_mask_nor_settings_a_model_runs_untiered_with_a_notice(tiny):
    with pytest.warns(UntieredWithoutMaskWarning):
        built = viasd_adapt.context(tiny.target)
    assert built.mode is Mode.NONE


def test_the_drafter_given_sets_aside_tuned_settings_measured_with_another(tiny, tmp_path):
    from tests.support.pairs import noisy_copy
    from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning

    path = _tuned_folder(tiny, tmp_path)
    assert viasd_adapt.context(tiny.target, mask=path, drafter=tiny.drafter).settings == CHOSEN  # control
    with pytest.warns(TunedForAnotherDrafterWarning):
        other = viasd_adapt.context(tiny.target, mask=path, drafter=noisy_copy(tiny.drafter, 0.5, seed=3))
    assert other.settings == TierSettings()


def test_anything_else_is_refused_by_name(tiny):
    with pytest.raises(ConfigError, match="takes a model .* or a pair .* got str"):
        viasd_adapt.context("mask.json")
    with pytest.raises(TypeError):
        viasd_adapt.context(tiny.target, tiny.mask)  # the run's options are keywords
    assert resolve_context(tiny.target, CHOSEN, mask=tiny.mask).settings == CHOSEN


# ----------------------------------------------------------------------------- a request holds its context


def test_a_request_derives_its_mode_and_settings_from_its_context(tiny):
    from viasd_adapt.frameworks.requests import RunRequest

    context = viasd_adapt.context(tiny.target, mask=tiny.mask, settings=CHOSEN)
    request = RunRequest.of(context, [5, 17, 2], 4, seed=3)
    assert (request.mode, request.settings, request.context, request.seed) == ("lossless", CHOSEN, context, 3)
    derived = RunRequest.tiered([5, 17, 2], 4, context=context)  # no settings given: the context's
    assert derived.settings == CHOSEN and derived.mode == "lossless"
    lossy = viasd_adapt.context(tiny.target, mask=tiny.mask, settings=CHOSEN.with_(mode="lossy"))
    assert RunRequest.of(lossy, [5], 4).mode == "lossy"  # control: another context, another mode
    # what would disagree with the context is refused
    with pytest.raises(ConfigError, match="disagree"):
        RunRequest("lossy", [5], 4, context=context)
    with pytest.raises(ConfigError, match="disagree"):
        RunRequest.tiered([5], 4, CHOSEN.with_(gamma=5), context=context)
    with pytest.raises(ConfigError, match="needs its settings, or the run's context"):
        RunRequest("lossless", [5], 4)


def test_a_request_types_its_context_as_the_run_context():
    import typing

    from viasd_adapt.frameworks.requests import RunRequest

    hints = typing.get_type_hints(RunRequest, localns={"RunContext": RunContext})
    assert hints["context"] == RunContext | None
