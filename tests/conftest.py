"""Shared pytest fixtures. Each fixture says which module it serves; add new ones below."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The ``tiny`` model pair, built once per test session into a temporary cache.

    Returns the pair directory (``<tmp>/tiny``) holding ``target/``, ``draft/``, ``tokenizer/`` and
    ``build_report.json``; load the models with ``AutoModelForCausalLM.from_pretrained``.
    Serves viasd_adapt.models tests and any test that needs a real (if tiny) Llama pair.
    """
    from viasd_adapt.models.build import build_pair

    return build_pair("tiny", out_dir=tmp_path_factory.mktemp("viasd-cache"), seed=0, progress=False)


def load_shipped_demo_pair():
    """``(pair, tokenizer, target, drafter)`` of the demo pair shipped in the package, fp32, eval.

    The pair and its DIMR mask are part of the package, so a missing one is a failure, not a skip.
    Serves the demo-pair tests of every adapter.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from viasd_adapt.models.registry import demo_pair_paths

    pair = demo_pair_paths()
    assert pair.mask is not None, "the shipped demo pair has no mask.json"
    tokenizer = AutoTokenizer.from_pretrained(str(pair.target))
    target = AutoModelForCausalLM.from_pretrained(str(pair.target), dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(str(pair.draft), dtype=torch.float32).eval()
    return pair, tokenizer, target, drafter


@pytest.fixture(scope="session")
def tiny_eagle(tmp_path_factory):
    """The tiny EAGLE setup of :mod:`tests.support.eagle` (targets and a head), built once per
    session. Serves the EAGLE adapter's test modules."""
    pytest.importorskip("eagle.model.ea_model")
    from tests.support.eagle import build_tiny_eagle

    return build_tiny_eagle(tmp_path_factory.mktemp("eagle"))


@pytest.fixture(scope="session")
def ea_model(tiny_eagle):
    """The tiny target with its head as an eagle ``EaModel``, loaded and sanity-checked once."""
    from viasd_adapt.adapters import eagle

    return eagle.load_ea_model(tiny_eagle / "target", tiny_eagle / "head")
