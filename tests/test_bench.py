"""``viasd bench``: rows, fields, medians, pass counting, the analytic bound, goals, JSON and plot.

The pair here is random and tiny (built from configs in milliseconds, with a character-level
tokenizer saved beside it), so the bench runs end to end through ``from_pretrained`` paths in
seconds. The drafter holds the target's first layer and head so that it agrees with the target
part of the time, and the head is sharpened so that distributions are peaked, not flat.
"""

from __future__ import annotations

import json
import statistics
import string

import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from viasd_adapt.bench.context import BenchContext, MaskInfo, build_context, fallback_mask, resolve_mask
from viasd_adapt.bench.costs import ForwardCosts, analytic_bound
from viasd_adapt.bench.goals import check_goals
from viasd_adapt.bench.measure import PassMeter, cache_bytes
from viasd_adapt.bench.plot import plot_rows
from viasd_adapt.bench.run import ROW_FIELDS, BenchConfig, positional_agreement, run_bench
from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_config, tiny_model
from viasd_adapt.routing import RoutingMask, SlimVerifier
from viasd_adapt.routing.mask import MaskArtifact, model_fingerprint
from viasd_adapt.runner import CachedRunner
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

VOCAB = 112
LAYERS = 6
PROMPTS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n"]


# ---------------------------------------------------------------------------- helpers


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII (ids < VOCAB)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split

    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    vocab = {"<unk>": 0, "<eos>": 1, "<pad>": 2, "<bos>": 3}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    assert len(vocab) <= VOCAB
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>", bos_token="<bos>")


def tiny_pair_models(seed: int = 0):
    target = tiny_model("llama", seed, num_layers=LAYERS, vocab_size=VOCAB)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(40.0)  # peaked distributions
    draft = AutoModelForCausalLM.from_config(tiny_config("llama", vocab_size=VOCAB, num_layers=1), attn_implementation="eager")
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if k in draft.state_dict()}, strict=False)
    return target.eval(), draft.eval()


def save_tiny_pair(root, with_mask: bool = False):
    """Writes ``root/{target,draft}`` (and ``mask.json`` if asked); returns ``root``."""
    target, draft = tiny_pair_models()
    tokenizer = char_tokenizer()
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    if with_mask:
        MaskArtifact(test_mask(), 0.33, fingerprint=model_fingerprint(target)).save(root / "mask.json")
    return root


def test_mask() -> RoutingMask:
    return RoutingMask.from_skipped(LAYERS, [2, 4])


test_mask.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def context():
    target, draft = tiny_pair_models()
    return BenchContext(
        target=target, draft=draft, tokenizer=char_tokenizer(), settings=TierSettings(gamma=3),
        sampling=SamplingConfig(), mask=MaskInfo(test_mask(), "test", False), device=torch.device("cpu"),
    )


@pytest.fixture(scope="module")
def result(context):
    config = BenchConfig(frameworks=("hf", "pearl"), max_new_tokens=10, repeats=3, cost_repeats=2)
    return run_bench(context, PROMPTS, config)


def _row(rows, framework, mode):
    matches = [r for r in rows if r["framework"] == framework and r["mode"] == mode]
    assert len(matches) == 1, (framework, mode, [(r["framework"], r["mode"]) for r in rows])
    return matches[0]


# ---------------------------------------------------------------------------- the bench run


def test_every_row_is_present_with_every_field(result):
    keys = [(r["framework"], r["mode"]) for r in result.rows]
    expected = [("ar", "-"), ("hf", "plain")] + [(fw, m) for fw in ("hf", "pearl") for m in ("none", "lossless", "lossy", "audit")]
    assert sorted(keys) == sorted(expected)
    for row in result.rows:
        assert set(ROW_FIELDS) <= set(row)
        assert row["tokens_per_s"] > 0
        assert len(row["repeats"]["tokens_per_s"]) == 3
        assert row["repeats"]["tokens"] == [2 * 10] * 3  # EOS never stops a bench generation


def test_reported_values_are_medians_of_the_repeats(result):
    for row in result.rows:
        assert row["tokens_per_s"] == pytest.approx(statistics.median(row["repeats"]["tokens_per_s"]))
    ar = _row(result.rows, "ar", "-")
    hf_none = _row(result.rows, "hf", "none")
    ratios = [a / b for a, b in zip(hf_none["repeats"]["tokens_per_s"], ar["repeats"]["tokens_per_s"])]
    assert hf_none["speedup_vs_ar"] == pytest.approx(statistics.median(ratios))  # paired within each repeat
    assert all(len(per_prompt) == len(PROMPTS) for per_prompt in hf_none["repeats"]["per_prompt_tokens_per_s"])
    assert ar["speedup_vs_ar"] == pytest.approx(1.0)
    assert hf_none["speedup_vs_untiered"] == pytest.approx(1.0)


def test_lossless_rows_reproduce_the_targets_greedy_output(result):
    for framework, mode in [("ar", "-"), ("hf", "plain"), ("hf", "none"), ("hf", "lossless"), ("pearl", "none"), ("pearl", "lossless")]:
        assert _row(result.rows, framework, mode)["greedy_agreement"] == 1.0, (framework, mode)


def test_pass_counts_reflect_what_each_row_ran(result):
    ar = _row(result.rows, "ar", "-")
    assert ar["full_passes_per_token"] == pytest.approx(1.0)  # one prefill + one forward per later token
    assert ar["slim_passes_per_token"] == 0 and ar["draft_passes_per_token"] == 0
    assert ar["rejection_rate"] is None
    for fw in ("hf", "pearl"):
        assert _row(result.rows, fw, "none")["slim_passes_per_token"] == 0
        assert _row(result.rows, fw, "none")["draft_passes_per_token"] > 0
        for mode in ("lossless", "lossy", "audit"):
            assert _row(result.rows, fw, mode)["slim_passes_per_token"] > 0
        # audit runs q in shadow every cycle, lossy only on escalation
        assert _row(result.rows, fw, "audit")["full_passes_per_token"] >= _row(result.rows, fw, "lossy")["full_passes_per_token"]


def test_audit_only_fields_and_bounds(result):
    for row in result.rows:
        if row["mode"] == "audit":
            assert 0.0 <= row["overrule_rate"] <= 1.0 and 0.0 <= row["tv_distance"] <= 1.0
        else:
            assert row["overrule_rate"] is None and row["tv_distance"] is None
        assert row["analytic_bound"] > 0
        assert row["fraction_of_bound"] == pytest.approx(row["speedup_vs_ar"] / row["analytic_bound"])
        assert row["peak_mem_mb"] > 0
    params_mb = sum(p.numel() * 4 for p in result_models_params()) / 2**20
    assert _row(result.rows, "ar", "-")["peak_mem_mb"] > params_mb  # target params + its KV cache


def result_models_params():
    target, _ = tiny_pair_models()
    return list(target.parameters())


# ---------------------------------------------------------------------------- pure parts


def test_positional_agreement_counts_same_position_matches_only():
    assert positional_agreement([1, 2, 3, 4], [1, 9, 3, 4]) == 3
    assert positional_agreement([2, 3, 4], [1, 2, 3]) == 0  # shifted by one: no re-alignment
    assert positional_agreement([1, 2], [1, 2, 3]) == 2


def test_analytic_bound_by_hand():
    costs = ForwardCosts(c_draft=1.0, c_slim=2.0, c_full_block=4.0, c_full=3.0, context_length=10, block_length=6)
    # per token: 1*1 + 0.5*2 + 0.25*4 = 3 -> bound 3/3
    assert analytic_bound(costs, 1.0, 0.5, 0.25) == pytest.approx(1.0)
    # overlapped: max(1, 2) = 2 -> 1.5
    assert analytic_bound(costs, 1.0, 0.5, 0.25, overlapped_drafting=True) == pytest.approx(1.5)
    assert analytic_bound(costs, 0.0, 0.0, 0.0) is None


def test_pass_meter_tells_full_slim_and_draft_apart(context):
    before = SlimVerifier(context.target, test_mask())  # a view built before the hooks exist
    with PassMeter(context.target, context.draft) as meter:
        after = SlimVerifier(context.target, test_mask())  # ... and one built after
        measure = meter.start()
        full = CachedRunner(context.target)
        full.logits_for([3, 4, 5], 1)
        full.logits_for([3, 4, 5, 6], 1)
        CachedRunner(before.model, before.new_cache).logits_for([3, 4, 5], 2)
        late = CachedRunner(after.model, after.new_cache)
        late.logits_for([3, 4, 5], 2)
        CachedRunner(context.draft).logits_for([3], 1)
        meter.stop()
        assert (measure.full_passes, measure.slim_passes, measure.draft_passes) == (2, 2, 1)
        assert measure.cache_peaks[id(full.cache)] == cache_bytes(full.cache) == full.cache_bytes()
        assert measure.cache_peaks[id(late.cache)] == late.cache_bytes() > 0
    assert not context.target._forward_hooks_with_kwargs  # hooks removed on exit


def test_fallback_mask_keeps_layer_zero_and_skips_round_r_l():
    mask = fallback_mask(16, 0.45)
    assert mask.keep[0] and mask.num_skipped == 7
    assert list(mask.skipped) == [1, 3, 5, 7, 9, 11, 13]
    assert fallback_mask(4, 0.75).num_skipped == 3 and fallback_mask(4, 0.75).keep[0]


def test_goals_are_judged_against_fixed_thresholds():
    def row(mode, tps, rej, agree=1.0, frac=None, x_untiered=None):
        return {"framework": "hf", "mode": mode, "tokens_per_s": tps, "rejection_rate": rej, "greedy_agreement": agree,
                "fraction_of_bound": frac, "speedup_vs_untiered": x_untiered}

    rows = [row("plain", 100.0, None, x_untiered=1.02), row("none", 98.0, 0.40, x_untiered=1.0),
            row("lossy", 130.0, 0.20, agree=0.95, frac=0.92, x_untiered=1.30)]
    got = {c.goal: c.met for c in check_goals(rows)}
    assert all(got.values()), got
    rows = [row("plain", 100.0, None, x_untiered=1.11), row("none", 90.0, 0.40, x_untiered=1.0),
            row("lossy", 100.0, 0.30, agree=0.95, frac=0.5, x_untiered=1.1)]
    got = {c.goal: c.met for c in check_goals(rows, preset="conservative")}
    assert not any(got.values()), got  # 10% overhead, 1.1x, 0.10 drop, 50% of bound, 95% < 97%


# ---------------------------------------------------------------------------- CLI, files, errors


def test_cli_bench_writes_json_and_plot(tmp_path):
    pair = save_tiny_pair(tmp_path / "pair", with_mask=True)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["bench", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--prompts", str(prompts),
            "--max-new-tokens", "6", "--repeats", "2", "--frameworks", "hf", "--modes", "lossy,audit",
            "--json", str(out_json), "--plot", str(out_png), "--preset", "conservative"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "hf/lossy" in res.output and "goals:" in res.output and "FALLBACK" not in res.output
    data = json.loads(out_json.read_text())
    assert [(r["framework"], r["mode"]) for r in data["rows"]] == [("ar", "-"), ("hf", "plain"), ("hf", "none"), ("hf", "lossy"), ("hf", "audit")]
    assert data["run"]["settings"]["alpha1"] == 0.2 and data["run"]["settings"]["alpha2"] == 0.1
    assert data["run"]["mask"]["skipped_layers"] == [2, 4] and not data["run"]["mask"]["is_fallback"]
    assert data["peak_mem_source"].startswith("parameter bytes")
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_rows_writes_png_with_missing_values(tmp_path):
    rows = [{"framework": "ar", "mode": "-", "speedup_vs_ar": 1.0, "analytic_bound": 1.0, "rejection_rate": None},
            {"framework": "hf", "mode": "lossy", "speedup_vs_ar": 1.4, "analytic_bound": 2.0, "rejection_rate": 0.2}]
    path = plot_rows(rows, tmp_path / "sub" / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_give_clear_errors(tmp_path, context):
    with pytest.raises(ConfigError, match="unknown framework"):
        BenchConfig(frameworks=("vllm",))
    with pytest.raises(ConfigError, match="unknown mode"):
        BenchConfig(modes=("fast",))
    other = tiny_model("llama", 5, num_layers=LAYERS, vocab_size=VOCAB)
    MaskArtifact(test_mask(), 0.33, fingerprint=model_fingerprint(other)).save(tmp_path / "other.json")
    with pytest.raises(ModelMismatchError):
        resolve_mask(context.target, tmp_path / "other.json", 0.45)
    res = CliRunner().invoke(cli, ["bench", "--target", str(tmp_path), "--draft", str(tmp_path)])
    assert res.exit_code == 2 and "not a model directory" in res.output
    assert "Traceback" not in res.output


def test_missing_mask_falls_back_visibly(tmp_path):
    pair = save_tiny_pair(tmp_path / "pair")
    ctx = build_context(pair / "target", pair / "draft", TierSettings(), SamplingConfig(), device="cpu")
    assert ctx.mask.is_fallback and "FALLBACK" in ctx.mask.source
