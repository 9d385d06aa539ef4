"""``viasd bench`` on encoder-decoder pairs (tiny T5 and BART): it runs, its forward costs are
decoder passes (the encoder runs once, before any timing, as in generation), and its fidelity
columns score the output the way the decoder wrote it (the target's own greedy output has no regret)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.support.pairs import CHAR_VOCAB, char_tokenizer, save_pair_dir
from tests.support.seq2seq import seq2seq_pair
from viasd_adapt.bench.costs import FASTEST_OF, measure_forward_costs, probe_context
from viasd_adapt.cli.main import cli
from viasd_adapt.routing.slim import SlimVerifier


@pytest.fixture(scope="module", params=["t5", "bart"])
def saved_pair(request, tmp_path_factory):
    target, drafter, mask = seq2seq_pair(request.param, vocab_size=CHAR_VOCAB)
    return request.param, save_pair_dir(tmp_path_factory.mktemp(request.param), target, drafter, char_tokenizer(), mask)


def test_bench_runs_on_an_encoder_decoder_pair(saved_pair, tmp_path):
    family, pair = saved_pair
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello world\nabc def\n")
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(cli, ["bench", "--target", str(pair / "target"), "--draft", str(pair / "draft"),
                                   "--mask", str(pair / "mask.json"), "--frameworks", "hf,engine", "--modes", "lenient,lossy",
                                   "--prompts", str(prompts), "--max-new-tokens", "4", "--repeats", "1",
                                   "--task-prompts", "0", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert res.exception is None and "Traceback" not in res.output
    rows = {(r["framework"], r["mode"]): r for r in json.loads(out.read_text())["rows"]}
    assert {("hf", "lossy"), ("engine", "lossy"), ("ar", "-")} <= set(rows)
    ar = rows[("ar", "-")]
    # the target's own greedy output, teacher-forced through its decoder: every token its argmax
    assert ar["regret"] == pytest.approx(0.0, abs=1e-6) and ar["target_argmax_agreement"] == 1.0
    assert all(r["full_equivalent_per_token"] > 0 for r in rows.values() if r["full_equivalent_per_token"] is not None)


class _Calls:
    """Counts the forward calls of a module (scoped: the hook is removed on exit)."""

    def __init__(self, module):
        self.module, self.count = module, 0

    def __enter__(self):
        self.handle = self.module.register_forward_hook(lambda *_: setattr(self, "count", self.count + 1))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_the_probe_times_decoder_passes_the_encoder_runs_once(family):
    target, drafter, mask = seq2seq_pair(family, vocab_size=CHAR_VOCAB)
    context, source = probe_context(target, [5, 6, 7, 8, 9], [10, 11, 12])
    assert source == [5, 6, 7, 8, 9] and context[1:] == [10, 11, 12] and len(context) == 4  # the decoder start first
    repeats = 3
    with _Calls(target.get_encoder()) as encoder, _Calls(target.get_decoder()) as decoder, \
            _Calls(drafter.get_encoder()) as drafter_encoder:
        costs = measure_forward_costs(target, drafter, SlimVerifier(target, mask), context, gamma=2, repeats=repeats,
                                      source=source)
    assert encoder.count == 1 and drafter_encoder.count == 1
    # q's two probes and u's (a routed view of the same decoder): prefill, warm-up and each timed try
    # (a round keeps the fastest of FASTEST_OF tries)
    assert decoder.count == 3 * (2 + repeats * FASTEST_OF)
    assert costs.c_resume is None and costs.c_slim > 0 and costs.c_draft > 0 and costs.c_full_block > 0
    assert costs.block_length == 3 and costs.context_length == len(context)
