"""Every adapter opens its tier through one set-up call (viasd_adapt.engine.context.open_context): the mask
file is read once per call, tuned.json at most once, and a mask path with settings=None runs the
tuned choice, exactly as the same settings and mask given in memory do."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

import viasd_adapt
from tests.support.loads import count_loads
from tests.support.pairs import truncated_pair
from viasd_adapt.config.advice import NegativeDeltaWarning
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.errors import ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import model_fingerprint

#: The tuned choice written beside the mask: not the defaults, so that running it is visible.
#: the tier on every cycle: tuned.json chooses the settings and nothing else (its measurements for the
#: adaptive tier: test_an_adaptive_tier_reads_the_tuned_file_once_for_its_priors)
CHOSEN = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, gamma=3, adaptive=False)
NEW_TOKENS = 8


@dataclass
class Case:
    """One adapter call: ``run(mask, settings)`` returns its tokens and the settings it ran."""

    target: torch.nn.Module  # the model the mask and tuned.json are fingerprinted on
    mask: RoutingMask
    run: Callable[[object, TierSettings | None], tuple[list[int], TierSettings]]
    name: str = ""


def _hf_case() -> Case:
    from viasd_adapt.adapters import hf

    pair = truncated_pair("llama", layers=4, sharpness=8.0)
    for model in (pair.target, pair.drafter):
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    ids = torch.tensor([[5, 17, 2, 40, 9]])

    def run(mask, settings):
        with hf.tiered(pair.target, context=viasd_adapt.context(pair.target, mask=mask, settings=settings)) as session:
            with torch.no_grad():
                out = pair.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=pair.drafter,
                                           max_new_tokens=NEW_TOKENS, do_sample=False)
        assert not session.fallbacks, session.fallbacks
        return out[0, ids.shape[1]:].tolist(), session.settings

    return Case(pair.target, pair.mask, run, "hf")


def _pearl_case() -> Case:
    from viasd_adapt.adapters.pearl import pearl_generate

    pair = truncated_pair("llama", layers=4, sharpness=8.0)
    ran: list[TierSettings] = []

    class Recorder:  # the settings the verify step runs, as the rule hooks see them (None: the built-in rule decides)
        @hookimpl
        def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
            ran.append(settings)

    def run(mask, settings):
        ran.clear()
        out = pearl_generate(pair.target, pair.drafter, [5, 17, 2, 40, 9], NEW_TOKENS,
                             context=viasd_adapt.context(pair.target,
                                                         settings=settings, mask=mask, plugins=[Recorder()]),
                             parallel=False, seed=0)
        return out.tokens, ran[-1]

    return Case(pair.target, pair.mask, run, "pearl")


def _eagle_case(request) -> Case:
    from tests.support.eagle import MASK, prompts
    from viasd_adapt.adapters import eagle
    from viasd_adapt.adapters.eagle.entry import decode

    ea_model = request.getfixturevalue("ea_model")
    ids = prompts(ea_model, 1)[0]

    def run(mask, settings):
        with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, mask=mask, settings=settings)) as session:
            kept, _ = decode(ea_model, ids, NEW_TOKENS, {"temperature": 0.0, "top_p": 0.0, "top_k": 0},
                            session=session)
        return [t for call in kept for t in call], session.settings

    return Case(ea_model.base_model, MASK, run, "eagle")


@pytest.fixture(params=["hf", "pearl", "eagle"])
def case(request) -> Case:
    if request.param == "eagle":
        return _eagle_case(request)
    return {"hf": _hf_case, "pearl": _pearl_case}[request.param]()


def _write_pair_files(folder: Path, case: Case, delta: float = -4.0, fingerprint: dict | None = None) -> Path:
    """``mask.json`` (with a negative Delta) and a tuned.json whose choice was measured with it."""
    own = model_fingerprint(case.target)
    mask_path = MaskArtifact(case.mask, delta=delta, fingerprint=own).save(folder / "mask.json")
    TunedSettings(CHOSEN, "lossy-fixed", case.mask.bits(), fingerprint if fingerprint is not None else own).save(
        folder / "tuned.json")
    return mask_path


def test_one_call_with_a_mask_path_reads_the_mask_once_and_runs_the_tuned_choice(case, tmp_path, monkeypatch):
    mask_path = _write_pair_files(tmp_path, case)
    with monkeypatch.context() as patched:
        mask_reads = count_loads(patched, MaskArtifact)
        tuned_reads = count_loads(patched, TunedSettings)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tokens, ran = case.run(str(mask_path), None)
        # before: the resolver, the Delta advice and the fingerprint check each read the mask
        assert mask_reads == [str(mask_path)]
        assert tuned_reads == [str(tmp_path / "tuned.json")]
        assert ran == CHOSEN  # settings=None: the tuned choice, measured with this very mask
        assert sum(issubclass(w.category, NegativeDeltaWarning) for w in caught) == 1  # from the artifact already read

        # settings given: tuned.json is not read at all, the mask still once
        with pytest.warns(NegativeDeltaWarning):
            given_tokens, given = case.run(mask_path, CHOSEN)
        assert mask_reads == [str(mask_path)] * 2 and len(tuned_reads) == 1 and given == CHOSEN

    # the same settings and mask in memory: the same tokens (nothing read, nothing changed)
    reference, _ = case.run(case.mask, CHOSEN)
    assert tokens == reference == given_tokens and len(tokens) == NEW_TOKENS


def test_an_adaptive_tier_reads_the_tuned_file_once_for_its_priors(case, tmp_path, monkeypatch):
    """Settings given and adapting: tuned.json beside the mask path chooses nothing, but its
    measurements price the adaptive tier's passes and give its priors, so HF and PEARL read it
    once; EAGLE, whose tree those points do not describe, does not read it."""
    from tests.support.adaptive import real_switching

    mask_path = _write_pair_files(tmp_path, case)
    adapting = CHOSEN.with_(adaptive=True)
    with monkeypatch.context() as patched:
        mask_reads = count_loads(patched, MaskArtifact)
        tuned_reads = count_loads(patched, TunedSettings)
        # the real controller, probing often, so that the tier runs and shows the settings it ran with
        with pytest.warns(NegativeDeltaWarning), real_switching():
            _, ran = case.run(mask_path, adapting)
    assert ran == adapting and mask_reads == [str(mask_path)]
    assert tuned_reads == ([] if case.name == "eagle" else [str(tmp_path / "tuned.json")])


def test_tuned_settings_of_another_model_are_refused_by_every_adapter(case, tmp_path):
    other = model_fingerprint(tiny_model("llama", 7, num_layers=2, vocab_size=112))
    mask_path = _write_pair_files(tmp_path, case, delta=1.0, fingerprint=other)
    with pytest.raises(ModelMismatchError, match=r"tuned settings .*tuned\.json belongs to another model"):
        case.run(mask_path, None)
    case.run(mask_path, CHOSEN)  # given settings: the tuned file is not consulted


def test_a_mask_for_another_model_is_refused_naming_its_file(case, tmp_path):
    other = tiny_model("llama", 7, num_layers=case.mask.num_layers, vocab_size=112)
    path = MaskArtifact(case.mask, fingerprint=model_fingerprint(other)).save(tmp_path / "foreign-mask.json")
    with pytest.raises(ModelMismatchError, match="foreign-mask.json belongs to another model"):
        case.run(path, CHOSEN)
