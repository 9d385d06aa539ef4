"""The import paths 0.2.0's documentation showed that moved keep working until 0.4.0, each with a
``DeprecationWarning`` that names the new path (:mod:`viasd_adapt.deprecated`).

The list below is read off 0.2.0's README, docs and examples (their ``import`` lines and the
module paths they name). Each is imported as a user's code would, ``from old import name``; the
warning must name the new path and the value must be the very object the new path gives.
Controls: a name an old module never had, and a module that never existed, still fail to import.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT
from viasd_adapt.deprecated import MOVED_MODULES, MOVED_NAMES

#: (old module, name, the module it lives in now)
OLD_PATHS = [
    ("viasd_adapt.settings", "TierSettings", "viasd_adapt.core.settings"),
    ("viasd_adapt.sampling", "SamplingConfig", "viasd_adapt.core.sampling"),
    ("viasd_adapt.hooks", "hookimpl", "viasd_adapt.core.hooks"),
    ("viasd_adapt.hooks", "make_plugin_manager", "viasd_adapt.core.hooks"),
    ("viasd_adapt.tiers", "Tier", "viasd_adapt.core.tiers"),
    ("viasd_adapt.cycle", "decide_cycle", "viasd_adapt.core.cycle"),
    ("viasd_adapt.rules", "BUILTIN_RULES", "viasd_adapt.core.rules"),
    ("viasd_adapt.plugins", "GreedyArgmaxAcceptance", "viasd_adapt.core.plugins"),
    ("viasd_adapt.monitor", "ViasdQualityWarning", "viasd_adapt.core.monitor"),
    ("viasd_adapt.verify_step", "VerifyStep", "viasd_adapt.core.verify_step"),
    ("viasd_adapt.advice", "NegativeDeltaWarning", "viasd_adapt.config.advice"),
    ("viasd_adapt.advice", "recommend", "viasd_adapt.config.budget"),
    ("viasd_adapt.tuned", "TunedSettings", "viasd_adapt.config.tuned"),
    ("viasd_adapt.resolve", "resolve_settings", "viasd_adapt.config.resolve"),
    ("viasd_adapt.schema", "Artifact", "viasd_adapt.config.schema"),
    ("viasd_adapt.pair", "load_pair", "viasd_adapt.models.pair"),
    ("viasd_adapt.pair", "RunRequest", "viasd_adapt.frameworks.requests"),
    ("viasd_adapt.prompt_lookup", "PromptLookupDrafter", "viasd_adapt.engine.prompt_lookup"),
    ("viasd_adapt.seq2seq", "seq2seq_generate", "viasd_adapt.engine.seq2seq"),
    ("viasd_adapt.seq2seq", "run_ar", "viasd_adapt.frameworks.seq2seq"),
    ("viasd_adapt.seq2seq_calibration", "build_seq2seq_calibration", "viasd_adapt.search.seq2seq_windows"),
    ("viasd_adapt.search.records", "SearchRecord", "viasd_adapt.config.search_record"),
    ("viasd_adapt.engine", "ModelDrafter", "viasd_adapt.engine.drafters"),
    ("viasd_adapt.engine", "TieredVerifier", "viasd_adapt.engine.verifier"),
    ("viasd_adapt.engine", "speculative_generate", "viasd_adapt.engine.loop"),
    ("viasd_adapt.routing", "RoutingMask", "viasd_adapt.config.mask"),
    ("viasd_adapt.tuning", "tuned_mask_path", "viasd_adapt.config.resolve"),
    # 0.3.0's docs: the pair-building modules, moved from viasd_adapt.models to viasd_adapt.training
    ("viasd_adapt.models.eagle_head", "train_eagle_head", "viasd_adapt.training.eagle_head"),
    ("viasd_adapt.models.eagle_head", "target_weights_digest", "viasd_adapt.models.eagle_head_files"),
    ("viasd_adapt.models.eagle_distill", "complete_head", "viasd_adapt.models.eagle_head_files"),
    ("viasd_adapt.models.build", "build_pair", "viasd_adapt.training.build"),
    ("viasd_adapt.models.corpus", "heldout_prompts", "viasd_adapt.training.corpus"),
]


@pytest.mark.parametrize("old, name, new", OLD_PATHS, ids=[f"{old}.{name}" for old, name, _ in OLD_PATHS])
def test_an_old_path_works_and_warns_with_the_new_one(old, name, new):
    if old in MOVED_MODULES:
        sys.modules.pop(old, None)  # imported fresh, as a program would on its first import
    namespace: dict = {}
    with pytest.warns(DeprecationWarning, match=rf"^viasd-adapt: {re.escape(old)}\.{name} moved to {re.escape(new)}\.{name}; "
                                                r"import it from there \(the old path goes in 0\.4\.0\)$"):
        exec(f"from {old} import {name}", namespace)  # noqa: S102  (the user's own import line)
    assert namespace[name] is getattr(importlib.import_module(new), name)


def test_every_path_kept_leads_somewhere():
    """Each module and name the table keeps resolves (a stale entry would fail a user late)."""
    for homes in MOVED_MODULES.values():
        for home in homes:
            importlib.import_module(home)
    for names in MOVED_NAMES.values():
        for name, home in names.items():
            assert hasattr(importlib.import_module(home), name), f"{home}.{name}"


def test_a_name_or_module_that_never_was_still_fails():
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName'"):
        exec("from viasd_adapt.settings import NoSuchName", {})  # noqa: S102
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName'"):
        exec("from viasd_adapt.engine import NoSuchName", {})  # noqa: S102
    with pytest.raises(ModuleNotFoundError, match="viasd_adapt.no_such_module"):
        importlib.import_module("viasd_adapt.no_such_module")


def test_a_script_on_the_old_path_runs_outside_the_test_run():
    """Outside pytest's warning filters: the script runs, and says where to import from."""
    code = "from viasd_adapt.settings import TierSettings; print(TierSettings().mode.value)"
    result = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "lossy"
    assert "viasd_adapt.settings.TierSettings moved to viasd_adapt.core.settings.TierSettings" in result.stderr
