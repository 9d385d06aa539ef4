"""The char pair on disk (tests/support/pairs.py), written once per session; each test gets its own
copy at ``tmp_path / "pair"``, since commands write beside it (``tuned.json``, searched masks)."""

from __future__ import annotations

import shutil

import pytest

from tests.support.pairs import save_char_pair


@pytest.fixture(scope="session")
def char_pair_template(tmp_path_factory):
    return save_char_pair(tmp_path_factory.mktemp("char-pair") / "pair", with_mask=True)


@pytest.fixture()
def char_pair(char_pair_template, tmp_path):
    """``target/``, ``draft/`` (each with the char tokenizer) and a fingerprinted ``mask.json``."""
    return shutil.copytree(char_pair_template, tmp_path / "pair")
