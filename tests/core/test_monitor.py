"""The drafter-quality monitor: lossy mode warns when gate 1 commits a junk drafter's tokens.

Before it, a random drafter with the right vocabulary size had its tokens committed in lossy mode
with no warning at all.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.pairs import load_shipped_demo_pair
from viasd_adapt.engine.drafters import ModelDrafter
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.core.monitor import DrafterQualityMonitor, ViasdQualityWarning
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.tiers import Tier
from viasd_adapt.routing.mask import load_mask


PROMPT = "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        "


@pytest.fixture(scope="module")
def demo():
    pair, tokenizer, target, drafter = load_shipped_demo_pair()
    mask = load_mask(pair.mask, target).mask
    torch.manual_seed(0)
    junk = AutoModelForCausalLM.from_config(drafter.config).eval()  # same vocabulary, random weights
    return tokenizer, target, drafter, junk, mask


def _run(demo, drafter, mode="lossy", sampling=SamplingConfig(), n=40):
    tokenizer, target, _, _, mask = demo
    verifier = tiered_verifier(target, TierSettings(mode=mode, adaptive=False), sampling,
                               slim=SlimVerifier(target, mask) if Mode(mode).uses_slim else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speculative_generate(ModelDrafter(drafter, sampling), verifier, tokenizer(PROMPT)["input_ids"], n,
                             generator=torch.Generator().manual_seed(0))
    return [w for w in caught if issubclass(w.category, ViasdQualityWarning)], verifier


def test_shipped_demo_pair_does_not_warn(demo):
    for sampling in (SamplingConfig(), SamplingConfig(do_sample=True)):
        found, verifier = _run(demo, demo[2], sampling=sampling)
        assert verifier.monitor.evidence.committed >= 12  # the evidence was there to judge
        assert found == [], found[0].message if found else None


def test_junk_drafter_warns_once_and_suggests_audit(demo):
    found, verifier = _run(demo, demo[3])
    assert len(found) == 1  # once per generation, although the evidence stays junk
    message = str(found[0].message)
    assert "mode='audit'" in message and "unrelated to the target" in message
    assert verifier.monitor.evidence.agreement < 0.5
    tokens = verifier.metrics.token_tiers
    assert tokens.count(int(Tier.DRAFT)) >= 12  # junk drafts were indeed committed
    # A second generation on the same verifier starts afresh and warns again.
    tokenizer = demo[0]
    with pytest.warns(ViasdQualityWarning):
        speculative_generate(ModelDrafter(demo[3], SamplingConfig()), verifier, tokenizer(PROMPT)["input_ids"], 40)


@pytest.mark.parametrize("mode", ["lossless", "audit", "none"])
def test_exact_and_audit_modes_never_warn(demo, mode):
    found, _ = _run(demo, demo[3], mode=mode, n=24)
    assert found == []


def test_sampling_evidence_uses_surprise_not_argmax():
    """Sampled drafts need not be u's argmax; junk shows as tokens u finds far more surprising
    than its own samples."""
    u = torch.softmax(torch.tensor([[4.0, 2.0, 1.0, 0.0, -6.0]]).repeat(4, 1), dim=-1)
    for tokens, junk in ((torch.tensor([1, 2, 1, 0]), False), (torch.tensor([4, 4, 4, 4]), True)):
        monitor = DrafterQualityMonitor(Mode.LOSSY, greedy=False)
        monitor.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ViasdQualityWarning)
            for _ in range(4):
                monitor._saw_gate1(tokens, u)
                monitor._committed([int(Tier.DRAFT)] * 4 + [int(Tier.SLIM)])
        assert monitor.evidence.committed == 16
        assert monitor.evidence.agreement < 0.5  # argmax agreement would call both junk
        assert monitor.looks_like_junk() is junk


def test_a_short_budget_is_judged_on_strong_evidence(demo):
    """A 12-token budget commits fewer than ``min_committed`` drafts: the junk drafter is still
    caught (0 of 4+ agreeing is strong evidence), the shipped drafter still is not."""
    found, verifier = _run(demo, demo[3], n=12)
    assert verifier.monitor.evidence.committed < 12 and len(found) == 1
    found, _ = _run(demo, demo[2], n=12)
    assert found == []


def test_every_framework_runs_the_monitor_through_the_cli(demo, tmp_path):
    """hf and pearl (and the engine) warn for a random drafter in lossy mode; EAGLE's session is
    covered in tests/adapters/eagle/test_eagle_demo.py."""
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    junk = tmp_path / "junk"
    demo[3].save_pretrained(junk)
    demo[0].save_pretrained(junk)
    for framework in ("hf", "pearl", "engine"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # the tier on every cycle: the adaptive tier would rarely give this drafter's drafts to gate 1
            result = CliRunner().invoke(cli, ["generate", "--framework", framework, "--draft", str(junk), "--mode", "lossy",
                                              "--no-adaptive", "--prompt", PROMPT, "--max-new-tokens", "12", "--no-color"])
        assert result.exit_code == 0, result.output
        assert any(issubclass(w.category, ViasdQualityWarning) for w in caught), framework


# ----------------------------------------------------------------------------- drafts gate 1 rejected


def _permuted(drafter, seed: int = 0):
    """The drafter with its token ids permuted: a trained LM whose ids mean other strings (a drafter
    for another model of the same vocabulary size). Gate 1 rejects nearly all of its drafts."""
    import copy

    clone = copy.deepcopy(drafter)
    order = torch.randperm(clone.get_input_embeddings().weight.shape[0], generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        clone.get_input_embeddings().weight.copy_(clone.get_input_embeddings().weight[order])
        if clone.get_output_embeddings().weight.data_ptr() != clone.get_input_embeddings().weight.data_ptr():
            clone.get_output_embeddings().weight.copy_(clone.get_output_embeddings().weight[order])
    return clone


def test_a_junk_drafter_whose_drafts_are_rejected_is_caught_on_the_drafts_gate_1_judged(demo):
    """Before, the monitor looked at committed drafts only: a drafter gate 1 rejects almost always
    (here: none of its drafts committed in 40 tokens) changed the output, tier 2 and 3 writing it,
    with no warning. The slim verifier's view of every judged draft says junk."""
    junk = _permuted(demo[2])
    for sampling in (SamplingConfig(), SamplingConfig(do_sample=True)):
        found, verifier = _run(demo, junk, sampling=sampling)
        evidence = verifier.monitor.evidence
        assert evidence.committed < 12 and evidence.judged >= 20
        assert len(found) == 1, sampling
        message = str(found[0].message)
        assert "drafts gate 1 judged" in message
        assert "unrelated to the target" in message


def test_prompt_lookup_drafts_are_not_judged_as_a_drafter_model(demo):
    """Prompt lookup proposes copies (a point mass): u's disagreement with a copied n-gram says
    nothing about a drafter model, and gate 1 commits a point mass only where u is confident."""
    from viasd_adapt.engine.prompt_lookup import PromptLookupSpec

    tokenizer, target, _, _, mask = demo
    ids = tokenizer(PROMPT)["input_ids"]
    for sampling in (SamplingConfig(), SamplingConfig(do_sample=True)):
        verifier = tiered_verifier(target, TierSettings(mode="lossy", adaptive=False), sampling,
                                   slim=SlimVerifier(target, mask))
        drafter = PromptLookupSpec().drafter(target.config.vocab_size, (), torch.device("cpu"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            speculative_generate(drafter, verifier, ids, 40, generator=torch.Generator().manual_seed(0))
        evidence = verifier.monitor.evidence
        assert evidence.point_mass and evidence.judged >= 20
        assert [w for w in caught if issubclass(w.category, ViasdQualityWarning)] == []


def test_the_judged_rule_on_evidence():
    """From 20 judged drafts, greedy and sampling alike: warns when their mean surprise excess
    (log u(x) + H(u)) is at most -5.0 nats. A point mass is never judged this way; committed drafts
    keep their own rule."""
    from viasd_adapt.core.monitor import DrafterEvidence, JunkThresholds, looks_like_junk

    rule = JunkThresholds()
    for greedy in (True, False):
        assert looks_like_junk(DrafterEvidence(judged=20, judged_surprise_excess=-100.0, point_mass=False), rule,
                               greedy) == "judged"
        assert looks_like_junk(DrafterEvidence(judged=20, judged_surprise_excess=-99.0, point_mass=False), rule,
                               greedy) is None
        assert looks_like_junk(DrafterEvidence(judged=19, judged_surprise_excess=-190.0, point_mass=False), rule,
                               greedy) is None
        assert looks_like_junk(DrafterEvidence(judged=20, judged_surprise_excess=-200.0, point_mass=True), rule,
                               greedy) is None
    # greedy agreement of the judged drafts does not count: SmolLM2's own drafter agrees with u on 19-45% of them
    assert looks_like_junk(DrafterEvidence(judged=40, judged_agreeing=0, judged_surprise_excess=0.0, point_mass=False),
                           rule, True) is None
    assert looks_like_junk(DrafterEvidence(judged=99, judged_surprise_excess=-999.0, point_mass=False),
                           JunkThresholds(min_judged=None), True) is None


def test_the_cli_warns_for_a_rejected_junk_drafter(demo, tmp_path):
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    junk = tmp_path / "permuted"
    _permuted(demo[2]).save_pretrained(junk)
    demo[0].save_pretrained(junk)
    from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning

    with pytest.warns(ViasdQualityWarning, match=r"drafts gate 1 judged .* the drafter looks unrelated to the target"), \
            pytest.warns(TunedForAnotherDrafterWarning):  # the demo pair's tuned.json was measured with its own drafter
        # the tier on every cycle: the adaptive tier judges only its tier cycles, and verifies untiered here
        result = CliRunner().invoke(cli, ["generate", "--framework", "hf", "--draft", str(junk), "--mode", "lossy",
                                          "--no-adaptive", "--prompt", PROMPT, "--max-new-tokens", "32", "--no-color"])
    assert result.exit_code == 0, result.output


# ----------------------------------------------------------------------------- the adaptive default


def test_the_adaptive_default_warns_for_a_junk_drafter_from_its_untiered_cycles(demo, tmp_path):
    """The adaptive tier (the default) keeps a junk drafter's lossy run untiered nearly throughout,
    so gate 1 sees too few drafts to judge; the untiered cycles' q judges them instead, in every
    framework, PEARL included (where, before, no warning came at all). Control: the pair's own
    drafter, under the same default, gets none."""
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    junk = tmp_path / "junk"
    _permuted(demo[2]).save_pretrained(junk)  # a trained drafter whose ids mean other strings
    demo[0].save_pretrained(junk)
    for framework in ("hf", "pearl", "engine"):
        for drafter, junky in ((str(junk), True), ("", False)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = CliRunner().invoke(cli, ["generate", "--framework", framework, *(["--draft", drafter] if drafter else []),
                                                  "--mode", "lossy", "--prompt", PROMPT, "--max-new-tokens", "24",
                                                  "--no-color"])
            assert result.exit_code == 0, result.output
            found = [str(w.message) for w in caught if issubclass(w.category, ViasdQualityWarning)]
            assert len(found) == int(junky), (framework, drafter, found)
            if junky:
                assert f"({framework})" in found[0] and "first drafts its untiered cycles judged a median" in found[0], found[0]


def test_an_untiered_cycle_is_judged_by_the_rank_of_its_first_draft_in_q():
    """The monitor's untiered evidence, on synthetic rows: the rank of each untiered cycle's first
    draft in q (the draft that follows committed text), as a share of the vocabulary, counts; a
    median of 10% or more from 12 such drafts warns, greedy and sampling alike. Drafts after the
    first are not counted; in a tier cycle, the lossless check asked after gate 1 (the reveal of
    the untiered arm) adds nothing; a point mass (prompt lookup) is left out."""
    vocab = 100
    q = torch.softmax(-torch.arange(vocab, dtype=torch.float32) / 10, dim=-1).repeat(4, 1)  # token i ranks i-th
    p = torch.full((4, vocab), 1.0 / vocab)
    for greedy in (True, False):
        for first, expected in ((50, True), (10, True), (9, False), (0, False)):
            tokens = torch.tensor([first, 99, 99, 99])  # the later drafts are junk either way: not counted
            monitor = DrafterQualityMonitor(Mode.LOSSY, greedy=greedy)
            monitor.start()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(12):
                    monitor._saw_untiered(tokens, q, p)
                    monitor._committed([int(Tier.FULL)])
            assert monitor.evidence.first_ranks == [first / vocab] * 12
            assert monitor.evidence.judged == monitor.evidence.committed == 0
            assert monitor.looks_like_junk() is expected, (greedy, first)
            found = [str(w.message) for w in caught if issubclass(w.category, ViasdQualityWarning)]
            assert len(found) == int(expected)
            if expected:
                assert f"a median {first}% of the way down its vocabulary" in found[0], found[0]
    # top-k sampling zeroes q's tail: a draft there ranks in the middle of it, not at its top
    truncated = q.clone()
    truncated[:, 5:] = 0.0
    monitor = DrafterQualityMonitor(Mode.LOSSY, greedy=False)
    monitor.start()
    monitor._saw_untiered(torch.tensor([99]), truncated, p)
    monitor._committed([int(Tier.FULL)])
    assert monitor.evidence.first_ranks == [(5 + (vocab - 5 - 1) / 2) / vocab]
    monitor = DrafterQualityMonitor(Mode.LOSSY, greedy=True)
    monitor.start()
    for _ in range(11):  # one short of the evidence the rule needs
        monitor._saw_untiered(torch.tensor([99]), q, p)
        monitor._committed([int(Tier.FULL)])
    assert not monitor.looks_like_junk()
    monitor.start()
    good = torch.tensor([0, 1, 2, 3])
    monitor._saw_gate1(good, q, p)
    monitor._saw_untiered(good, q, p)  # a tier cycle's reveal
    monitor._committed([int(Tier.DRAFT)] * 4)
    assert monitor.evidence.judged == 4 and monitor.evidence.first_ranks == []
    monitor.start()
    junk = torch.tensor([99, 99, 99, 99])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ViasdQualityWarning)
        for _ in range(12):
            monitor._saw_untiered(junk, q, torch.nn.functional.one_hot(junk, vocab).float())
            monitor._committed([int(Tier.FULL)])
    assert len(monitor.evidence.first_ranks) == 12 and not monitor.looks_like_junk()
