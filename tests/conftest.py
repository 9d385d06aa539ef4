"""Session fixtures shared across folders (each says what it serves). Helpers that are not fixtures
(pairs, statistics, framework drivers) live in tests/support/; the conformance suite's drivers have
their own conftest.py in their folder."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The ``tiny`` model pair, built once per test session into a temporary cache.

    Returns the pair directory (``<tmp>/tiny``) holding ``target/``, ``draft/``, ``tokenizer/`` and
    ``build_report.json``; load the models with ``AutoModelForCausalLM.from_pretrained``.
    Serves viasd_adapt.models tests and any test that needs a real (if tiny) Llama pair.
    """
    from viasd_adapt.training.build import build_pair

    return build_pair("tiny", out_dir=tmp_path_factory.mktemp("viasd-cache"), seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_eagle(tmp_path_factory):
    """The tiny EAGLE setup of :mod:`tests.support.eagle` (targets and a head), built once per
    session. Serves the EAGLE adapter's test modules and the conformance suite's EAGLE cases."""
    pytest.importorskip("eagle.model.ea_model")
    from tests.support.eagle import build_tiny_eagle

    return build_tiny_eagle(tmp_path_factory.mktemp("eagle"))


@pytest.fixture(scope="session")
def ea_model(tiny_eagle):
    """The tiny target with its head as an eagle ``EaModel``, loaded and sanity-checked once."""
    from viasd_adapt.adapters import eagle

    return eagle.load_ea_model(tiny_eagle / "target", tiny_eagle / "head")


@pytest.fixture(scope="session")
def tuned_pair_template(tmp_path_factory):
    """A char pair with a mask and the hand-written tuned.json of :mod:`tests.support.tuned`, built
    once. Serves the resolver's tests (tests/tuning) and the CLI's (tests/cli/test_resolve_cli.py)."""
    from tests.support.pairs import save_char_pair
    from tests.support.tuned import write_tuned

    pair = save_char_pair(tmp_path_factory.mktemp("tuned-pair") / "pair", with_mask=True)
    write_tuned(pair)
    return pair


@pytest.fixture()
def tuned_pair(tuned_pair_template, tmp_path):
    """A fresh copy of :func:`tuned_pair_template` per test (tests may rewrite its files)."""
    import shutil

    return shutil.copytree(tuned_pair_template, tmp_path / "pair")


@pytest.fixture(scope="session")
def char_pair_template(tmp_path_factory):
    """The char pair on disk (tests/support/pairs.py), written once per session."""
    from tests.support.pairs import save_char_pair

    return save_char_pair(tmp_path_factory.mktemp("char-pair") / "pair", with_mask=True)


@pytest.fixture()
def char_pair(char_pair_template, tmp_path):
    """``target/``, ``draft/`` (each with the char tokenizer) and a fingerprinted ``mask.json``: a
    copy per test at ``tmp_path / "pair"``, since commands write beside it (``tuned.json``, masks).
    Serves the bench's tests and the CLI's."""
    import shutil

    return shutil.copytree(char_pair_template, tmp_path / "pair")


def pytest_configure(config):
    """One torch thread per test process: the suite runs one worker per core (xdist), and the tiny
    models of the tests gain nothing from intra-op threads, which on a full machine only contend."""
    import torch

    torch.set_num_threads(1)
