"""eagle's swapped functions dispatch per thread and per EaModel: a thread without a scope (or a
generation of another EaModel) runs stock eagle while a scope is open elsewhere."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("eagle.model.ea_model")

import viasd_adapt
from tests.support.eagle import MASK, prompts  # noqa: E402
from tests.support.expected_warnings import junk_drafter_warning  # noqa: E402
from viasd_adapt.adapters import eagle  # noqa: E402
from viasd_adapt.errors import ViasdError  # noqa: E402
from viasd_adapt.core.settings import TierSettings  # noqa: E402

LOSSY = TierSettings(mode="lossy", alpha1=0.95, alpha2=0.9, adaptive=False)  # tolerant enough to change greedy output


@pytest.fixture(scope="module")
def second_model(tiny_eagle):
    """A second EaModel of the same pair (an EaModel has one KV cache: one generation at a time)."""
    return eagle.load_ea_model(tiny_eagle / "target", tiny_eagle / "head", sanity_check=False)


def _stock(model, ids, n=16) -> list[int]:
    return model.eagenerate(ids, max_new_tokens=n)[0, ids.shape[1] :].tolist()[:n]


def _in_thread(function):
    """Runs ``function`` in a new thread; returns a join() that re-raises its exception."""
    box: dict = {}

    def target():
        try:
            box["value"] = function()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target)
    thread.start()

    def join():
        thread.join(timeout=120)
        assert not thread.is_alive()
        if "error" in box:
            raise box["error"]
        return box.get("value")

    return join


def test_stock_eagenerate_in_another_thread_stays_stock_while_a_lossy_scope_is_open(ea_model, second_model):
    ids = prompts(ea_model, 1)[0]
    stock = _stock(second_model, ids)
    with junk_drafter_warning("eagle"):  # the tiny head looks unrelated to the monitor
        lossy = eagle.generate(second_model, ids, 16,
                               context=viasd_adapt.context(second_model, mask=MASK, settings=LOSSY)).tokens
    assert lossy != stock  # power: had the other thread been tiered, its output would have changed
    with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, mask=MASK, settings=LOSSY)) as session:
        join = _in_thread(lambda: _stock(second_model, ids))  # runs while the names are swapped
        with junk_drafter_warning("eagle"):
            ea_model.eagenerate(ids, max_new_tokens=16)  # this thread's lossy generation, concurrently
        assert join() == stock
        assert session.last_metrics.slim_passes > 0
    assert len(session.generations) == 1  # the other thread's generation was not recorded here
    assert not eagle.is_patched()


def test_another_model_in_the_same_thread_gets_stock_eagle(ea_model, second_model):
    ids = prompts(ea_model, 2)[1]
    stock = _stock(second_model, ids)
    with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, mask=MASK, settings=LOSSY)) as session:
        assert _stock(second_model, ids) == stock
        ea_model.eagenerate(ids, max_new_tokens=8)
        assert _stock(second_model, ids) == stock  # after a tiered generation of the scope's model too
    assert len(session.generations) == 1


def test_scopes_on_two_models_in_two_threads_run_side_by_side(ea_model, second_model):
    ids = prompts(ea_model, 1)[0]
    expected = _stock(ea_model, ids, 20)
    barrier = threading.Barrier(2, timeout=60)

    def lossless(model, strategy):
        with eagle.tiered(model,
                          context=viasd_adapt.context(model,
                                                      mask=MASK,
                                                      settings=TierSettings(mode="lossless", adaptive=False)),
                          options=eagle.EagleOptions(lossless_strategy=strategy)) as session:
            barrier.wait()  # both scopes are open before either generates
            tokens = model.eagenerate(ids, max_new_tokens=20)[0, ids.shape[1] :].tolist()[:20]
            barrier.wait()  # and both stay open until both are done
        return tokens, session.last_metrics

    join = _in_thread(lambda: lossless(second_model, "cascade"))
    tokens, metrics = lossless(ea_model, "route")
    other_tokens, other_metrics = join()
    assert tokens == expected == other_tokens
    assert metrics.slim_passes > 0 and other_metrics.slim_passes > 0
    assert not eagle.is_patched()


def test_one_model_in_two_scopes_is_refused(ea_model):
    with eagle.tiered(ea_model, context=viasd_adapt.context(ea_model, mask=MASK, settings=LOSSY)):
        join = _in_thread(lambda: eagle.tiered(ea_model,
                                               context=viasd_adapt.context(ea_model,
                                                                           settings=TierSettings(mode="none"))).__enter__())
        with pytest.raises(ViasdError, match="another thread"):
            join()
        assert eagle.is_patched()
    assert not eagle.is_patched()
