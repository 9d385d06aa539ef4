"""Tuned settings belong to a pair: the adapters that run ``settings=None`` (viasd tune's choice
beside the mask) check it against the drafter when it arrives (HF: per call, its assistant model;
PEARL: its drafter; EAGLE: its head) and run the defaults for another one, with a
TunedForAnotherDrafterWarning. The demo pair runs here beside its tuned.json pinned to its own best
lenient point (tests/support/tuned.py; no slim passes), whatever the tune last chose; the defaults
are lossy (slim passes)."""

from __future__ import annotations

import contextlib

import pytest
import viasd_adapt
from tests.support.expected_warnings import negative_delta_warning
from tests.support.pairs import load_shipped_demo_pair, noisy_copy
from tests.support.tuned import write_shipped_tuned_as
from viasd_adapt.engine.context import RunContext
from viasd_adapt.adapters import hf
from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning, TunedSettings


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``(pair, mask, target, drafter, other, ids)``: ``mask`` is a copy of the demo mask beside the
    pinned lenient tuned.json."""
    pair, tokenizer, target, drafter = load_shipped_demo_pair()
    tuned = write_shipped_tuned_as("demo", tmp_path_factory.mktemp("demo-lenient"), "lenient", with_mask=True)
    other = noisy_copy(drafter, 0.02, seed=11)  # another drafter of the same target (a nearly as good one)
    ids = tokenizer("def add(a, b):", return_tensors="pt").input_ids
    assert TunedSettings.load(tuned).settings.mode.value == "lenient"
    return pair, tuned.parent / "mask.json", target, drafter, other, ids


@contextlib.contextmanager
def another_drafter():
    with pytest.warns(TunedForAnotherDrafterWarning, match="measured with another drafter.*not applied"), \
            negative_delta_warning():  # the defaults are lossy, on the demo mask (its Delta(u) < 0)
        yield


def test_hf_checks_each_calls_assistant_against_the_tuned_drafter(demo, monkeypatch):
    pair, mask, target, drafter, other, ids = demo
    ran = []  # the settings of each call's verify step
    built = RunContext.verify_step  # every call's step is built by its run context
    monkeypatch.setattr(RunContext, "verify_step", lambda context, *args, **kwargs: ran.append(context.settings) or built(
        context, *args, **kwargs))
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask)) as session:
        target.generate(ids, assistant_model=drafter, max_new_tokens=4, do_sample=False)
        assert session.last_metrics.slim_passes == 0 and session.settings.mode.value == "lenient"  # the tuned choice
        assert ran[-1].mode.value == "lenient"
        with another_drafter():
            target.generate(ids, assistant_model=other, max_new_tokens=4, do_sample=False)
        assert ran[-1] == hf.TierSettings()  # the defaults (lossy, adaptive) ran this call
        assert session.settings.mode.value == "lenient"  # and the session is the tuned one again
        target.generate(ids, assistant_model=drafter, max_new_tokens=4, do_sample=False)
        assert session.last_metrics.slim_passes == 0 and len(session.history) == 3
    # settings given: nothing is checked (they are the caller's)
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask,
                                               settings=TunedSettings.load(mask.parent / "tuned.json").settings)):
        target.generate(ids, assistant_model=other, max_new_tokens=4, do_sample=False)


def test_pearl_checks_its_drafter_against_the_tuned_drafter(demo):
    pair, mask, target, drafter, other, ids = demo
    own = pearl_generate(target, drafter, ids[0].tolist(), 4,
                         context=viasd_adapt.context(target, mask=mask), parallel=False, seed=0)
    assert own.metrics.slim_passes == 0
    from tests.support.adaptive import real_switching

    with another_drafter(), real_switching():  # the defaults (lossy, adaptive) ran: their tier, probed, calls u
        out = pearl_generate(target, other, ids[0].tolist(), 4,
                             context=viasd_adapt.context(target, mask=mask), parallel=False, seed=0)
    assert out.metrics.slim_passes > 0


def test_eagle_does_not_run_a_choice_measured_with_a_drafter_model(demo):
    pytest.importorskip("eagle.model.ea_model")
    from viasd_adapt.adapters import eagle

    pair, mask = demo[:2]
    ea_model = eagle.load_ea_model(pair.target, pair.eagle_head)
    with another_drafter():
        with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, mask=mask)) as session:
            assert session.settings.mode.value == "lossy"  # the defaults, not the tuned lenient choice
