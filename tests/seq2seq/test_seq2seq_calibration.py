"""DIMR calibration for encoder-decoder targets: teacher-forced decoder windows, scored log-probs
with the encoder run once, and mask costs on them (the pairs files are read by the prompts room)."""

from __future__ import annotations

import pytest
import torch

from tests.support.seq2seq import seq2seq_pair, source_for
from viasd_adapt.core.cost import routed_path_cost
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.models.tiny_seq2seq import synthetic_features
from viasd_adapt.routing.encdec import EncoderContext
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.search.seq2seq_windows import (
    build_seq2seq_calibration,
    build_seq2seq_windows,
    encode_pairs,
    greedy_decode,
)


def test_encode_pairs_keeps_targets_only_when_every_pair_has_one():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel({w: i for i, w in enumerate(["<unk>", "a", "b", "c"])}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    sources, targets = encode_pairs(tokenizer, [("a b c", "c"), ("b b", "a b")], max_source_tokens=2)
    assert sources == [[1, 2], [2, 2]] and targets == [[3], [1, 2]]
    assert encode_pairs(tokenizer, [("a", "b"), ("c", None)])[1] is None


@pytest.mark.parametrize("family", ["t5", "bart", "whisper"])
def test_windows_are_the_target_greedy_output_and_score_with_the_encoder_run_once(family):
    target, drafter, mask = seq2seq_pair(family)
    if family == "whisper":
        sources = [synthetic_features(i)[0] for i in range(3)]
    else:
        sources = [source_for(family, i, length=3 + 2 * i)["input_ids"][0].tolist() for i in range(3)]
    windows = build_seq2seq_windows(target, sources, new_tokens=6)
    start = target.generation_config.decoder_start_token_id
    eos = target.generation_config.eos_token_id
    for i, source in enumerate(sources):
        source = torch.as_tensor(source).unsqueeze(0)
        expected = greedy_decode(target, EncoderContext.encode(target, source), [start], 6, [eos])
        row = windows.decoder_ids[i, : 1 + len(expected)].tolist()
        assert row == [start] + expected
        assert int(windows.scored[i].sum()) == len(expected)
    calls = []
    hook = target.get_encoder().register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    try:
        full = windows.log_probs(target, batch_size=2)
        slim = [windows.log_probs(SlimVerifier(target, RoutingMask.from_skipped(4, s)).model, 2) for s in ([1, 3], [2])]
    finally:
        hook.remove()
    assert len(calls) == 2  # two batches, one encoder run each, for q and both slim views
    assert full.shape == (windows.num_scored, 96) and all(s.shape == full.shape for s in slim)
    assert torch.allclose(windows.log_probs(target, batch_size=1), full, atol=1e-4)  # padding changes nothing
    assert not torch.allclose(slim[0], full, atol=1e-3)
    # each row's scored log-probs are the model's own teacher-forced ones on the unpadded source
    source = torch.as_tensor(sources[1]).unsqueeze(0)
    n = int(windows.scored[1].sum())
    with torch.no_grad():
        direct = target(**{target.main_input_name: source}, decoder_input_ids=windows.decoder_ids[1:2, :n]).logits
    first = int(windows.scored[0].sum())
    assert torch.allclose(full[first : first + n], direct[0].log_softmax(-1), atol=1e-4)


def test_reference_windows_and_mask_costs_rank_the_mask_that_skips_inert_layers_first():
    target, drafter, _ = seq2seq_pair("bart", layers=6)
    inert = [2, 4]
    with torch.no_grad():  # two decoder layers that barely write: skipping them costs little
        for index in inert:
            layer = find_decoder_stack(target).layers[index]
            for module in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                module.weight.mul_(0.01)
    sources = [source_for("bart", i, length=6)["input_ids"][0].tolist() for i in range(4)]
    references = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16], [20, 21]]
    calibration = build_seq2seq_calibration(target, drafter, sources, new_tokens=4, references=references,
                                            continuation="reference", batch_size=4)
    assert calibration.tau == 4 + 3 + 4 + 2  # references cut to new_tokens
    assert calibration.windows.decoder_ids[1, :4].tolist() == [target.generation_config.decoder_start_token_id, 10, 11, 12]

    def cost(skipped):
        slim = calibration.windows.log_probs(SlimVerifier(target, RoutingMask.from_skipped(6, skipped)).model)
        return float(routed_path_cost(calibration.logp_full, slim, calibration.logp_draft, 0.5, 0.3).sum())

    assert cost(inert) < min(cost([1, 3]), cost([3, 5]), cost([1, 5]))


def test_calibration_refuses_bad_inputs():
    target, drafter, _ = seq2seq_pair("bart")
    sources = [[5, 6, 7]]
    with pytest.raises(ConfigError, match="one reference"):
        build_seq2seq_windows(target, sources, continuation="reference")
    with pytest.raises(ConfigError, match="continuation must be"):
        build_seq2seq_windows(target, sources, continuation="beam")
    with pytest.raises(ConfigError, match="not an encoder-decoder"):
        build_seq2seq_windows(tiny_model("llama"), sources)
    with pytest.raises(ConfigError, match="no calibration sources"):
        build_seq2seq_windows(target, [])
    with pytest.raises(Exception, match="outside the target's vocabulary"):
        build_seq2seq_windows(target, [[500]])
    with pytest.raises(Exception, match="cannot read the source"):
        build_seq2seq_calibration(target, tiny_model("llama", vocab_size=96), sources)


def test_rouge_l_from_rouge_score():
    pytest.importorskip("rouge_score")
    from viasd_adapt.bench.text_scores import rouge_l_f1

    # LCS("a b c d", "a c d") = 3: precision 1, recall 3/4, F1 6/7
    assert rouge_l_f1(["a b c d", "x"], ["a c d", "x"]) == pytest.approx((6 / 7 + 1.0) / 2)
    with pytest.raises(ConfigError, match="2 predictions for 1 references"):
        rouge_l_f1(["a"], ["a", "b"])
