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
