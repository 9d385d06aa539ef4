"""The plugin's wiring without vLLM: version gate, config helper, and the sampler attachment on a
stand-in sampler shaped like vLLM's (``forward`` calls ``self.apply_logits_processors``, then takes
the greedy argmax test per request). The real engine is tested in test_vllm_engine.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.support.tuned import write_shipped_tuned_as
from viasd_adapt.errors import ConfigError
from viasd_adapt.serving import vllm_plugin
from viasd_adapt.serving.vllm_plugin import TESTED_VLLM, VllmVersionError, attach, check_vllm_version, engine_config



@pytest.fixture(scope="module")
def demo_tuned(tmp_path_factory) -> Path:
    """The demo pair's tuned.json choosing its best lenient point (tests/support/tuned.py), whatever
    ``viasd tune`` last chose for the pair: the rule these tests serve."""
    return write_shipped_tuned_as("demo", tmp_path_factory.mktemp("demo-lenient"), "lenient")


@pytest.mark.parametrize("version", ["0.31.9", "0.33.0", "1.0.0", "0.9.2"])
def test_untested_vllm_versions_get_a_clear_error(version):
    with pytest.raises(VllmVersionError, match=rf"tested with vllm >={TESTED_VLLM[0]},<{TESTED_VLLM[1]}, this is vllm {version}"):
        check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.32.0", "0.32.3", "0.32.0+cpu", "v0.32.1rc1"])
def test_tested_versions_pass(version):
    assert check_vllm_version(version) == version


def test_an_unreadable_version_is_an_error():
    with pytest.raises(VllmVersionError, match="cannot read"):
        check_vllm_version("dev")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_engine_config_without_vllm_says_how_to_get_it(demo_tuned):
    with pytest.raises(VllmVersionError, match="vLLM is not installed.*setup_venv.sh"):
        engine_config(demo_tuned)


def test_engine_config_checks_the_file_first(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        engine_config(tmp_path / "missing.json")


class StandInSampler(torch.nn.Module):
    """Greedy rejection sampling the way vLLM's RejectionSampler structures it (not its code)."""

    def apply_logits_processors(self, logits, sampling_metadata, metadata):
        return logits

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        target = self.apply_logits_processors(logits[metadata.target_logits_indices].clone(), sampling_metadata, metadata)
        argmax = target.argmax(-1)
        out = torch.full((len(metadata.num_draft_tokens), max(metadata.num_draft_tokens) + 1), -1)
        start = 0
        for req, n in enumerate(metadata.num_draft_tokens):
            k = 0
            while k < n and argmax[start + k] == metadata.draft_token_ids[start + k]:
                out[req, k] = argmax[start + k]
                k += 1
            out[req, k] = argmax[start + k] if k < n else logits[metadata.bonus_logits_indices[req]].argmax()
            start += n
        return SimpleNamespace(sampled_token_ids=out)


def _step(seed=0, requests=4, gamma=5, vocab=40):
    gen = torch.Generator().manual_seed(seed)
    rows = requests * (gamma + 1)
    logits = torch.randn(rows, vocab, generator=gen)
    target_idx = torch.tensor([r * (gamma + 1) + i for r in range(requests) for i in range(gamma)])
    bonus_idx = torch.tensor([r * (gamma + 1) + gamma for r in range(requests)])
    top2 = logits[target_idx].topk(2, -1).indices
    drafts = torch.where(torch.rand(len(target_idx), generator=gen) < 0.5, top2[:, 0], top2[:, 1])
    meta = SimpleNamespace(num_draft_tokens=[gamma] * requests, draft_token_ids=drafts,
                           target_logits_indices=target_idx, bonus_logits_indices=bonus_idx)
    sampling = SimpleNamespace(all_greedy=True, all_random=False, temperature=None)
    return meta, logits, sampling


def _engine(additional_config):
    runner = SimpleNamespace(rejection_sampler=StandInSampler())
    attach(runner, SimpleNamespace(additional_config=additional_config))
    return runner.rejection_sampler


def _accepted(output):
    return int(((output.sampled_token_ids != -1).sum(-1) - 1).sum())


def test_an_engine_that_did_not_ask_is_not_touched():
    runner = SimpleNamespace(rejection_sampler=StandInSampler())
    assert attach(runner, SimpleNamespace(additional_config={})) is None
    assert "forward" not in vars(runner.rejection_sampler)


def test_lenience_zero_is_token_identical_and_more_lenience_accepts_more(tmp_path, demo_tuned):
    stock = StandInSampler()
    zero = _engine({"viasd": {"tuned": str(demo_tuned), "lenience": 0.0}})
    audit = tmp_path / "audit.json"
    tuned = _engine({"viasd": {"tuned": str(demo_tuned), "audit": str(audit)}})
    gained = 0
    for seed in range(20):
        meta, logits, sampling = _step(seed)
        base = stock(meta, None, logits, sampling)
        assert torch.equal(zero(meta, None, logits.clone(), sampling).sampled_token_ids, base.sampled_token_ids)
        out = tuned(meta, None, logits.clone(), sampling)
        assert _accepted(out) >= _accepted(base)
        gained += _accepted(out) - _accepted(base)
    assert gained > 0
    data = json.loads(audit.read_text())
    assert data["lenience"] == json.loads(demo_tuned.read_text())["settings"]["lenience"] > 0 and data["steps"] == 20
    assert data["overruled"] > 0 and data["regret_per_token"] > 0


def test_sampled_requests_keep_the_lossless_rule(demo_tuned):
    meta, logits, _ = _step(3, requests=2)
    sampling = SimpleNamespace(all_greedy=False, all_random=False, temperature=torch.tensor([0.0, 0.7]))
    engine = _engine({"viasd": {"tuned": str(demo_tuned), "lenience": 0.9}})
    seen = {}
    stock_processors = engine._viasd_attachment._stock_processors

    def spy(lg, sm, md):
        seen["before"] = lg.clone()
        return stock_processors(lg, sm, md)

    engine._viasd_attachment._stock_processors = spy
    target = engine.apply_logits_processors(logits[meta.target_logits_indices].clone(), sampling, meta)
    assert torch.equal(target[5:], seen["before"][5:])  # the sampled request's rows are untouched
    assert not torch.equal(target[:5], seen["before"][:5])  # the greedy request's are raised


def test_an_engine_without_drafts_is_refused(demo_tuned):
    runner = SimpleNamespace()
    with pytest.raises(ConfigError, match="needs speculative decoding"):
        attach(runner, SimpleNamespace(additional_config={"viasd": {"tuned": str(demo_tuned)}}))


def test_the_entry_point_is_declared():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert f'{vllm_plugin.ENTRY_POINT} = "viasd_adapt.serving.vllm_plugin:register"' in text


def test_wrapping_is_idempotent_and_calls_the_original():
    calls = []

    class Runner:
        def __init__(self, config):
            calls.append("init")
            self.config = config

    def after(runner, result, args, kwargs):
        calls.append(("after", args[0]))
        return result

    vllm_plugin._wrap(Runner, "__init__", after)
    vllm_plugin._wrap(Runner, "__init__", after)  # vLLM may load plugins several times per process
    Runner("cfg")
    assert calls == ["init", ("after", "cfg")]
