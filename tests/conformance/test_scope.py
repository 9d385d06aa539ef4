"""Scopes, on every framework: whatever a generation patches or starts (the HF patch of
``generate``, eagle's swapped functions and tree mode, PEARL's threads and intra-op thread count,
hooks on the engine's target) is restored after it ends, also when it ends with an exception, and
the target's own paths give the same outputs as before.

Threads and nesting are framework-specific (tests/adapters/hf/test_hf_scope.py,
tests/adapters/eagle/test_eagle_threads.py, tests/adapters/pearl/test_pearl.py).
"""

from __future__ import annotations

import pytest

from tests.support.frameworks import Boom, ExplodingObserver
from viasd_adapt.core.settings import TierSettings


MODES = ["none", "lenient", "lossless", "lossy", "audit"]
FRAMEWORKS = ["engine", "hf", "pearl", "eagle", "seq2seq"]
SCOPED = ["hf", "eagle", "seq2seq"]  # frameworks with a scope of their own (hf.tiered, eagle.tiered)


def _driver(drivers, request, framework):
    if framework == "seq2seq":  # T5: its relative position bias makes the cached forward a sharp check
        return drivers.greedy(request, "seq2seq", "t5")
    return drivers.modes(request, framework)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_restored_after_a_generation_in_every_mode(drivers, request, framework):
    driver = _driver(drivers, request, framework)
    before = driver.snapshot()
    for mode in MODES:
        driver.generate(driver.prompts[1], 8, TierSettings(mode=mode))
        driver.assert_pristine()
    assert driver.snapshot() == before


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_restored_after_an_exception_inside_a_generation(drivers, request, framework, mode):
    driver = _driver(drivers, request, framework)
    settings = TierSettings(mode=mode)
    before = driver.snapshot()
    expected = driver.generate(driver.prompts[1], 12, settings).tokens
    with pytest.raises(Boom), driver.failing_drafter(at=3) as calls:
        driver.generate(driver.prompts[1], 12, settings)
    assert len(calls) == 3
    driver.assert_pristine()
    assert driver.snapshot() == before
    assert driver.generate(driver.prompts[1], 12, settings).tokens == expected  # nothing half-done is left


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_observers_exception_reaches_the_caller_and_the_scope_is_restored(drivers, request, framework, mode):
    """A plugin is the user's code: its errors are not swallowed, in any mode."""
    driver = _driver(drivers, request, framework)
    with pytest.raises(Boom):
        driver.generate(driver.prompts[1], 12, TierSettings(mode=mode), plugins=[ExplodingObserver(at=3)])
    driver.assert_pristine()


@pytest.mark.parametrize("framework", SCOPED)
def test_restored_after_an_exception_in_the_users_code_inside_the_scope(drivers, request, framework):
    driver = _driver(drivers, request, framework)
    before = driver.snapshot()
    prompt = driver.prompts[1]
    with pytest.raises(ZeroDivisionError):
        with driver.scope(TierSettings(mode="lossy")):
            with pytest.raises(AssertionError):  # inside, the scope is visible: the check can fail
                driver.assert_pristine()
            driver.generate_in_scope(prompt, 4)
            1 / 0
    driver.assert_pristine()
    assert driver.snapshot() == before
