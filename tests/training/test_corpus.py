"""The corpus: deterministic file list, whole-file held-out split, reproducible prompts."""

from __future__ import annotations

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.training import corpus


def test_split_is_by_whole_files_and_disjoint():
    train, heldout = corpus.split_files()
    train_names = {f.relative_path for f in train}
    heldout_names = {f.relative_path for f in heldout}
    assert train and heldout
    assert not train_names & heldout_names
    assert train_names | heldout_names == {f.relative_path for f in corpus.corpus_files()}
    assert all(corpus.is_heldout(name) for name in heldout_names)
    assert 0.01 < len(heldout) / (len(train) + len(heldout)) < 0.15


def test_file_order_is_sorted_and_excludes_tests_and_site_packages():
    names = [f.relative_path for f in corpus.corpus_files()]
    assert names == sorted(names)
    assert not any(part in corpus.EXCLUDED_DIRS for name in names for part in name.split("/")[:-1])
    assert "os.py" in names


def test_corpus_from_a_custom_root(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "third.py").write_text("y = 2\n")
    (tmp_path / "a.py").write_text("z = 3\n")
    assert [f.relative_path for f in corpus.corpus_files(tmp_path)] == ["a.py", "pkg/mod.py"]


def test_heldout_prompts_are_deterministic_and_come_from_heldout_files():
    prompts = corpus.heldout_prompts(6, seed=3)
    assert prompts == corpus.heldout_prompts(6, seed=3)
    assert corpus.heldout_prompts(3, seed=3) == prompts[:3]
    assert prompts != corpus.heldout_prompts(6, seed=4)
    assert all(200 <= len(p) <= 400 for p in prompts)
    heldout_text = "".join(corpus.heldout_text())
    assert all(p in heldout_text for p in prompts)


def test_heldout_prompts_reject_bad_arguments():
    with pytest.raises(ConfigError):
        corpus.heldout_prompts(-1)
    with pytest.raises(ConfigError):
        corpus.heldout_prompts(1, min_chars=500, max_chars=100)
