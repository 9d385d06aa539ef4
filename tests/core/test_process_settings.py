"""A library run gives back the process-wide settings it sets for itself: torch's thread count and
transformers' verbosity and progress bars (:mod:`viasd_adapt.process_settings`). A program that
runs a bench or the demo from Python, then generates, keeps its own threads and still hears
transformers' notices; a later test in the same worker does too."""

from __future__ import annotations

import pytest
import torch
from transformers.utils import logging as hf_logging

from viasd_adapt.bench.demo import BUDGETS, run_demo
from viasd_adapt.process_settings import process_settings_restored


def _settings() -> tuple[int, int, bool]:
    return torch.get_num_threads(), hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()


@pytest.fixture()
def program_settings():
    """Settings no library run would choose (three threads, warnings shown, bars on), restored after."""
    before = _settings()
    torch.set_num_threads(3)
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    yield _settings()
    torch.set_num_threads(before[0])
    hf_logging.set_verbosity(before[1])
    (hf_logging.enable_progress_bar if before[2] else hf_logging.disable_progress_bar)()


def _change_everything() -> None:
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def test_the_scope_restores_threads_verbosity_and_bars_also_when_its_body_raises(program_settings):
    with process_settings_restored():
        _change_everything()
        assert _settings() != program_settings  # the body did change them
    assert _settings() == program_settings
    with pytest.raises(RuntimeError), process_settings_restored():
        _change_everything()
        raise RuntimeError("a run that fails")
    assert _settings() == program_settings
    _change_everything()  # control: the same changes outside the scope stay
    assert _settings() != program_settings


def test_the_demo_leaves_the_programs_settings_as_it_found_them(char_pair, program_settings):
    """The demo runs on one thread and silences transformers for its own output; the control runs
    the same demo without the restoring scope (the function it wraps) and finds the settings changed."""
    quiet = dict(pair=str(char_pair), budget=BUDGETS["tiny"], echo=lambda line: None, write=lambda text: None,
                 progress=False, frameworks="hf")
    run_demo(**quiet)
    assert _settings() == program_settings
    run_demo.__wrapped__(**quiet)
    assert _settings() != program_settings
