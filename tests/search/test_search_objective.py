"""Calibration, the DIMR objective and the search pipeline on tiny random models from config."""

from __future__ import annotations

import json

import pytest
import torch

from viasd_adapt.core.cost import block_cost
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.search.config import CalibrationConfig, SearchConfig
from viasd_adapt.checks import check_drafter_pair
from viasd_adapt.search.decoder_windows import build_calibration, build_windows
from viasd_adapt.search.objective import AgreementProbe, MaskObjective
from viasd_adapt.search.pipeline import run_stages
from viasd_adapt.search.prompt_ids import PromptIds
from viasd_adapt.prompts.splits import search_prompt_file
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.routing.mask import load_mask


VOCAB = 96


def prompts(n: int, seed: int, length: int = 10) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(VOCAB, (length + i,), generator=g).tolist() for i in range(n)]


@pytest.fixture(scope="module", params=["qwen2", "gpt2"])
def pair(request):
    target = tiny_model(request.param, seed=0, num_layers=6)
    draft = tiny_model(request.param, seed=1, num_layers=1)
    return target, draft


def test_windows_score_exactly_the_targets_greedy_continuation(pair):
    target, _ = pair
    windows = build_windows(target, prompts(3, 0), new_tokens=5)
    assert windows.num_scored == 3 * 5
    # rows differ in length (right padding); each row scores 5 positions
    assert windows.scored.sum(dim=1).tolist() == [5, 5, 5]
    with torch.no_grad():
        logits = target(input_ids=windows.input_ids, use_cache=False).logits
    next_tokens = torch.roll(windows.input_ids, -1, dims=1)
    # at every scored position the teacher-forced argmax is the token the target greedily wrote
    assert torch.equal(logits.argmax(-1)[windows.scored], next_tokens[windows.scored])


def test_full_mask_objective_is_the_direct_cost(pair):
    """With no layer skipped u = q, so C(q||u) = 0 and the objective is C_alpha1(q||p), computed
    here from plain forwards of target and drafter, not through the slim view."""
    target, draft = pair
    cal = build_calibration(target, draft, prompts(2, 1), new_tokens=4)
    objective = MaskObjective(target, cal, TierSettings())
    with torch.no_grad():
        lq = torch.log_softmax(target(input_ids=cal.windows.input_ids).logits[cal.windows.scored], -1)
        lp = torch.log_softmax(draft(input_ids=cal.windows.input_ids).logits[cal.windows.scored], -1)
    expected = float(block_cost(lq, lp, alpha=0.5))
    score = objective.score(RoutingMask.full(6))
    assert score.cost == pytest.approx(expected, rel=1e-4)
    assert score.agreement == 1.0
    # a mask that skips layers changes the slim model, hence the cost
    assert objective(RoutingMask.from_skipped(6, [1, 2, 4])) != pytest.approx(expected, rel=1e-4)


def test_margin_objective_sums_the_top1_log_margin_against_q_and_unknown_objectives_are_refused(pair):
    """``objective="margin"``: zero for u = q, and for a skipping mask the summed gap between u's top
    log-prob and u's log-prob of q's argmax, computed here from a plain slim forward."""
    from viasd_adapt.routing.slim import SlimVerifier

    target, draft = pair
    cal = build_calibration(target, draft, prompts(2, 1), new_tokens=4)
    objective = MaskObjective(target, cal, TierSettings(), objective="margin")
    assert objective(RoutingMask.full(6)) == 0.0 and not objective.drafter_term
    mask = RoutingMask.from_skipped(6, [1, 2, 4])
    with torch.no_grad():
        lq = torch.log_softmax(target(input_ids=cal.windows.input_ids).logits[cal.windows.scored], -1)
        slim = SlimVerifier(target, mask).model
        lu = torch.log_softmax(slim(input_ids=cal.windows.input_ids).logits[cal.windows.scored], -1)
    expected = float((lu.max(-1).values - lu.gather(-1, lq.argmax(-1, keepdim=True)).squeeze(-1)).sum())
    score = objective.score(mask)
    assert score.cost == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert (score.cost == 0) == (score.agreement == 1.0)
    with pytest.raises(ValueError, match="unknown mask objective 'kl'"):
        MaskObjective(target, cal, objective="kl")


@pytest.mark.parametrize("kind", ["routed", "q-only", "margin"])
def test_the_search_cost_is_the_scored_cost_for_every_objective(pair, kind):
    """``objective(mask)`` (what a search minimises, without the reported extras) is exactly
    ``objective.score(mask).cost``; both count as evaluations."""
    target, draft = pair
    cal = build_calibration(target, draft, prompts(2, 5), new_tokens=4)
    objective = MaskObjective(target, cal, TierSettings(), objective=kind)
    for skipped in ([1, 2, 4], [3], [5]):
        mask = RoutingMask.from_skipped(6, skipped)
        assert objective(mask) == pytest.approx(objective.score(mask).cost, rel=1e-6, abs=1e-7)
    assert objective.evaluations == 6 and objective.seconds > 0


def test_agreement_probe(pair):
    target, draft = pair
    probe = AgreementProbe(target, build_windows(target, prompts(2, 2), new_tokens=6))
    assert probe.of_model(target) == 1.0
    assert probe.of_mask(RoutingMask.full(6)) == 1.0
    with torch.no_grad():
        ids, scored = probe.windows.input_ids, probe.windows.scored
        expected = (draft(input_ids=ids).logits[scored].argmax(-1) == target(input_ids=ids).logits[scored].argmax(-1))
    assert probe.of_model(draft) == pytest.approx(expected.float().mean().item())


def search(target, draft, calib_ids, heldout_ids=(), **changes):
    """The three stages on token ids: DIMR with the paper's routed cost, 4 new tokens per window."""
    config = SearchConfig(**{"strategy": "dimr", "objective": "routed", "calibration": CalibrationConfig(new_tokens=4),
                             **changes})
    return run_stages(target, draft, PromptIds(list(calib_ids), list(heldout_ids)), config)


def test_pipeline_artifact_roundtrip_and_refuses_other_model(pair, tmp_path):
    target, draft = pair
    settings = dict(ratio=0.5, steps=8, bo_every=3, patience=0, seed=4)
    outcome = search(target, draft, prompts(3, 3), prompts(2, 4), compare_random=4, **settings)
    history = outcome.result.history
    assert len(history) == 8 and len({e.bits for e in history}) == 8
    assert all(e.bits.count(0) == 3 for e in history)
    artifact = outcome.artifact
    assert artifact.mask.num_skipped == 3 and artifact.score == pytest.approx(min(e.cost for e in history), rel=1e-5)
    report = artifact.report
    assert len(report.random_compare.costs) == 4 and len(report.random_compare.heldout_agreement) == 4
    assert 0.0 <= report.heldout_agreement <= 1.0 and report.tau == 12
    path = artifact.save(tmp_path / "mask.json")
    loaded = load_mask(path, target)
    assert loaded.mask == artifact.mask and loaded.search.bo_every == 3
    assert json.loads(path.read_text())["fingerprint"]["num_layers"] == 6
    other = tiny_model(target.config.model_type, seed=9, num_layers=6)
    with pytest.raises(ModelMismatchError):
        load_mask(path, other)
    # same seed, same search
    again = search(target, draft, prompts(3, 3), **settings)
    assert [e.bits for e in again.result.history] == [e.bits for e in history]
    assert [e.cost for e in again.result.history] == [e.cost for e in history]


def test_mismatched_vocabularies_are_refused():
    target = tiny_model("qwen2", seed=0, num_layers=4)
    draft = tiny_model("qwen2", seed=1, num_layers=1, vocab_size=128)
    with pytest.raises(ModelMismatchError, match="vocabulary mismatch: the target has 96 tokens, the drafter 128"):
        check_drafter_pair(target, draft)
    with pytest.raises(ModelMismatchError):
        search(target, draft, prompts(1, 0), ratio=0.5, steps=2)


def test_mismatched_tokenizers_are_refused():
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    target = tiny_model("gpt2", seed=0, num_layers=2)
    draft = tiny_model("gpt2", seed=1, num_layers=1)
    same = {f"t{i}": i for i in range(VOCAB)}
    swapped = dict(same, t0=1, t1=0)
    check_drafter_pair(target, draft, Tok(same), Tok(dict(same)))
    with pytest.raises(ModelMismatchError, match="tokenizers have different vocabularies"):
        check_drafter_pair(target, draft, Tok(same), Tok(swapped))


def test_ratio_errors_before_any_forward():
    target = tiny_model("gpt2", seed=0, num_layers=4)
    draft = tiny_model("gpt2", seed=1, num_layers=1)
    for ratio in (0.0, 1.0, -0.2):
        with pytest.raises(ConfigError, match=r"\(0, 1\)"):
            search(target, draft, prompts(1, 0), ratio=ratio)
    with pytest.raises(ConfigError, match="at least one layer must remain"):
        search(target, draft, prompts(1, 0), ratio=0.9)  # round(3.6) = 4 of 4 layers
    with pytest.raises(ConfigError, match="no layer|at least one layer"):
        search(target, draft, prompts(1, 0), ratio=0.1)  # round(0.4) = 0: nothing to route


def test_calibration_files_hold_out_their_tail(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("def f():\n\n    return 1\nx = 2\n")
    assert search_prompt_file(lines, 1) == (["def f():", "    return 1"], ["x = 2"])
    assert search_prompt_file(lines, 0) == (["def f():", "    return 1", "x = 2"], [])
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(["a\nb", "c"]))
    assert search_prompt_file(listed, 1) == (["a\nb"], ["c"])
    with pytest.raises(ConfigError, match=r"has 2 prompts; more than --heldout-prompts \(2\) are needed"):
        search_prompt_file(listed, 2)
    for text in ("", "\n  \n", "[]"):
        empty = tmp_path / "empty.txt"
        empty.write_text(text)
        with pytest.raises(ConfigError, match="empty"):
            search_prompt_file(empty, 0)
    with pytest.raises(ConfigError, match="not found"):
        search_prompt_file(tmp_path / "missing.txt", 0)


def test_prompt_ids_outside_the_vocabulary_are_refused():
    target = tiny_model("qwen2", seed=0, num_layers=2)
    with pytest.raises(ModelMismatchError, match="outside the target's vocabulary"):
        build_windows(target, [[1, 2, VOCAB]], new_tokens=2)


def test_a_large_vocabulary_is_scored_a_few_windows_per_forward_with_the_same_log_probs(pair, monkeypatch):
    """Windows x columns x vocabulary logits in one forward were over a gigabyte at Qwen2's vocabulary:
    a forward holds at most LOGITS_ELEMENTS of them, and splitting the batch changes no value."""
    import viasd_adapt.search.decoder_windows as dw
    from viasd_adapt.routing.slim import SlimVerifier

    target, _ = pair
    windows = build_windows(target, prompts(6, 4), new_tokens=5)
    whole = dw.scored_log_probs(target, windows, batch_size=None)
    width = windows.input_ids.size(1)
    monkeypatch.setattr(dw, "LOGITS_ELEMENTS", 2 * width * VOCAB)  # two windows' logits
    assert dw.batch_size_for(windows, vocab=VOCAB) == 2
    assert dw.batch_size_for(windows) == 6  # without a vocabulary, the token budget alone
    sizes = []
    handle = target.get_output_embeddings().register_forward_hook(lambda m, i, out: sizes.append(out.numel()))
    try:
        split = dw.scored_log_probs(target, windows, batch_size=None)
    finally:
        handle.remove()
    assert len(sizes) == 3 and max(sizes) <= 2 * width * VOCAB
    assert torch.equal(split, whole)
    objective = MaskObjective(target, build_calibration(target, target, prompts(6, 4), new_tokens=5))
    mask = RoutingMask.from_bits([1, 0, 1, 1, 0, 1])
    assert objective.prefix is not None and len(objective.prefix.states) == 3
    assert torch.equal(objective.slim_log_probs(mask), dw.scored_log_probs(SlimVerifier(target, mask).model, windows, 6))
