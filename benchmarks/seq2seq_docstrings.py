"""A trained encoder-decoder pair on a task every machine has data for, and VIA-SD on it.

Task: summarise a standard-library function into the first line of its docstring. Source: the
function's code with its docstring removed; target: the docstring's first line. Train/held-out
split by whole file with :func:`viasd_adapt.training.corpus.split_files` (the same split as the
decoder-only pairs), so no held-out function's file was seen in training.

Pair (mBART layout: pre-norm, learned positions; built from configs and trained from scratch by this script):

* target: 3 encoder layers, 8 decoder layers, width 128, trained with decoder LayerDrop (on half of
  the steps up to half of decoder layers 1..7 are bypassed), so a slim verifier has layers it can
  afford to skip (docs/results.md, "Where the slim tier could pay");
* drafter: 1 encoder layer, 1 decoder layer, width 128, trained first; the target's shared token
  embedding starts from the drafter's (the demo pair's head start).

Phases (each caches its result under ``$VIASD_CACHE/seq2seq-docstring/``):

* ``build``: data, tokenizer, drafter, target; held-out loss of each;
* ``search``: DIMR mask (``r = 0.45`` of the 8 decoder layers) on source -> target-greedy
  calibration windows (:mod:`viasd_adapt.search.seq2seq_windows`), with random masks for comparison;
* ``eval``: on held-out functions, rows target greedy, untiered SD (our loop, and stock HF assisted
  generation), lenient at several tolerances, lossless, lossy at several gate settings, audit.
  Columns: ROUGE-L F1 against the reference docstring line (``rouge-score``), agreement with the
  target's greedy output, the target's mean log-likelihood per token of the produced text, full /
  slim / draft passes per token, and full-equivalent passes per token from FLOP ratios (no timing:
  the machine this runs on is shared, so wall-clock ratios would be noise).

Run (1 thread): ``python benchmarks/seq2seq_docstrings.py all``. ``--fast`` shrinks every budget
for a smoke run.
"""

from __future__ import annotations

import argparse
import ast
import math
import random
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import viasd_adapt
from viasd_adapt.search.seq2seq_windows import pad_rows
from viasd_adapt.routing.mask import load_mask
from viasd_adapt.config.schema import read_json
from viasd_adapt.io import json_text

MAX_SOURCE_CHARS = 700
MAX_SOURCE_TOKENS = 160
MAX_TARGET_TOKENS = 32
VOCAB_SIZE = 2048


# ============================================================================ data


@dataclass(frozen=True)
class Example:
    source: str
    target: str
    file: str


def _strip_docstring(lines: list[str], node: ast.AST) -> str | None:
    """The function's code (decorators excluded) without its docstring statement, dedented."""
    first = node.body[0]
    start, end = node.lineno - 1, node.end_lineno
    doc_start, doc_end = first.lineno - 1, first.end_lineno
    kept = lines[start:doc_start] + lines[doc_end:end]
    if len(node.body) == 1:  # nothing but the docstring: no code to summarise
        return None
    return textwrap.dedent("\n".join(kept)).strip("\n")


def function_examples(relative: str, text: str) -> list[Example]:
    """(code without docstring, first docstring line) for every documented function of one file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc:
            continue
        summary = doc.strip().splitlines()[0].strip()
        if not 8 <= len(summary) <= 120 or len(summary.split()) < 2:
            continue
        code = _strip_docstring(lines, node)
        if not code:
            continue
        out.append(Example(code[:MAX_SOURCE_CHARS], summary, relative))
    return out


def load_examples() -> tuple[list[Example], list[Example]]:
    """(train, held-out) examples, split by file as the decoder-only pairs are; deduplicated by source."""
    from viasd_adapt.training import corpus

    train_files, heldout_files = corpus.split_files()
    seen: set[str] = set()

    def collect(files) -> list[Example]:
        examples = []
        for source_file in files:
            for example in function_examples(source_file.relative_path, source_file.read()):
                if example.source not in seen:
                    seen.add(example.source)
                    examples.append(example)
        return examples

    return collect(train_files), collect(heldout_files)



# ============================================================================ build


@dataclass(frozen=True)
class Budget:
    """Training budget of one model."""

    steps: int
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup: int = 40
    layerdrop_fraction: float = 0.0  # share of steps with bypassed decoder layers
    layerdrop_max_ratio: float = 0.5  # at most this share of decoder layers 1.. bypassed


TARGET_SHAPE = dict(encoder_layers=3, decoder_layers=8)
DRAFT_SHAPE = dict(encoder_layers=1, decoder_layers=1)
TARGET_BUDGET = Budget(steps=900, layerdrop_fraction=0.5)
DRAFT_BUDGET = Budget(steps=700)


def cache_root() -> Path:
    from viasd_adapt.models.registry import cache_dir

    return cache_dir() / "seq2seq-docstring"


def model_config(tokenizer, encoder_layers: int, decoder_layers: int):
    from transformers import MBartConfig

    config = MBartConfig(
        vocab_size=len(tokenizer), d_model=128, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
        max_position_embeddings=256, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id, forced_eos_token_id=None, scale_embedding=True,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "eager"
    return config


def new_model(tokenizer, seed: int, **shape):
    from transformers import MBartForConditionalGeneration

    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(model_config(tokenizer, **shape))
    generation = model.generation_config
    generation.forced_eos_token_id = None
    generation.decoder_start_token_id = tokenizer.bos_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    generation.max_length = None
    return model


def encode_source(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text)["input_ids"])[: MAX_SOURCE_TOKENS - 1] + [tokenizer.eos_token_id]


def encode_target(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])[: MAX_TARGET_TOKENS - 1] + [tokenizer.eos_token_id]


def batch_loss(model, tokenizer, sources: list[list[int]], targets: list[list[int]]) -> torch.Tensor:
    """Teacher-forced cross-entropy per target token (EOS included)."""
    source_ids, source_mask = pad_rows(sources, tokenizer.pad_token_id)
    decoder_rows = [[tokenizer.bos_token_id] + t[:-1] for t in targets]
    decoder_ids, _ = pad_rows(decoder_rows, tokenizer.pad_token_id)
    labels, label_mask = pad_rows(targets, -100)
    labels[label_mask == 0] = -100
    logits = model(input_ids=source_ids, attention_mask=source_mask, decoder_input_ids=decoder_ids, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)


def train(model, tokenizer, data: list[tuple[list[int], list[int]]], budget: Budget, seed: int, label: str) -> list[float]:
    """AdamW with warm-up and cosine decay; LayerDrop through weight-sharing routed views (the
    slim-verifier machinery itself: the bypassed layers' weights get no gradient that step)."""
    from viasd_adapt.training.train import optimizer_step
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.routing.slim import build_routed_view

    rng = random.Random(seed)
    order_gen = torch.Generator().manual_seed(seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=budget.learning_rate, betas=(0.9, 0.95), weight_decay=0.05)

    def factor(step: int) -> float:
        if step < budget.warmup:
            return (step + 1) / budget.warmup
        progress = (step - budget.warmup) / max(1, budget.steps - budget.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    layers = model.config.decoder_layers
    order, cursor, losses, started = torch.randperm(len(data), generator=order_gen), 0, [], time.perf_counter()
    for step in range(budget.steps):
        if cursor + budget.batch_size > len(order):
            order, cursor = torch.randperm(len(data), generator=order_gen), 0
        batch = [data[int(i)] for i in order[cursor : cursor + budget.batch_size]]
        cursor += budget.batch_size
        forward = model
        if budget.layerdrop_fraction and layers > 1 and rng.random() < budget.layerdrop_fraction:
            most = max(1, round(budget.layerdrop_max_ratio * layers))
            skipped = rng.sample(range(1, layers), rng.randint(1, most))
            forward = build_routed_view(model, RoutingMask.from_skipped(layers, skipped))
        loss = batch_loss(forward, tokenizer, [b[0] for b in batch], [b[1] for b in batch])
        losses.append(optimizer_step(model, optimizer, scheduler, loss))
        if step % 50 == 0 or step == budget.steps - 1:
            recent = sum(losses[-50:]) / len(losses[-50:])
            print(f"  {label} step {step + 1}/{budget.steps} loss {recent:.3f} ({time.perf_counter() - started:.0f}s)", flush=True)
    model.eval()
    return losses


@torch.no_grad()
def heldout_loss(model, tokenizer, data, batch_size: int = 32) -> float:
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        batch = data[start : start + batch_size]
        tokens = sum(len(t) for _, t in batch)
        total += float(batch_loss(model, tokenizer, [s for s, _ in batch], [t for _, t in batch])) * tokens
        count += tokens
    return total / count


def build(args) -> None:
    from viasd_adapt.io import write_json
    from viasd_adapt.training.tokenizer import train_tokenizer

    root = cache_root()
    started = time.perf_counter()
    train_examples, heldout_examples = load_examples()
    print(f"data: {len(train_examples)} train / {len(heldout_examples)} held-out functions (split by file)")
    tokenizer = train_tokenizer([e.source for e in train_examples] + [e.target for e in train_examples], VOCAB_SIZE)
    train_data = [(encode_source(tokenizer, e.source), encode_target(tokenizer, e.target)) for e in train_examples]
    heldout_data = [(encode_source(tokenizer, e.source), encode_target(tokenizer, e.target)) for e in heldout_examples]
    draft_budget, target_budget = DRAFT_BUDGET, TARGET_BUDGET
    if args.fast:
        draft_budget = Budget(steps=20, batch_size=8)
        target_budget = Budget(steps=20, batch_size=8, layerdrop_fraction=0.5)
    draft = new_model(tokenizer, seed=1, **DRAFT_SHAPE)
    draft_losses = train(draft, tokenizer, train_data, draft_budget, seed=1, label="draft")
    target = new_model(tokenizer, seed=0, **TARGET_SHAPE)
    with torch.no_grad():  # head start: the shared token embedding (tied with the head) from the drafter
        target.get_input_embeddings().weight.copy_(draft.get_input_embeddings().weight)
    target_losses = train(target, tokenizer, train_data, target_budget, seed=0, label="target")
    report = {
        "train_functions": len(train_examples),
        "heldout_functions": len(heldout_examples),
        "vocab_size": len(tokenizer),
        "target_shape": TARGET_SHAPE,
        "draft_shape": DRAFT_SHAPE,
        "target_budget": target_budget.__dict__,
        "draft_budget": draft_budget.__dict__,
        "heldout_loss": {"target": round(heldout_loss(target, tokenizer, heldout_data), 4),
                         "draft": round(heldout_loss(draft, tokenizer, heldout_data), 4)},
        "final_train_loss": {"target": round(sum(target_losses[-50:]) / len(target_losses[-50:]), 4),
                             "draft": round(sum(draft_losses[-50:]) / len(draft_losses[-50:]), 4)},
        "build_seconds": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(),
    }
    for name, model in (("target", target), ("draft", draft)):  # loadable as a pair by `viasd generate`
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    tokenizer.save_pretrained(root / "tokenizer")
    write_json(root / "data.json", {"train": [e.__dict__ for e in train_examples],
                                    "heldout": [e.__dict__ for e in heldout_examples]})
    write_json(root / "build.json", report)
    print(json_text(report), end="")


# ============================================================================ search


def load_built():
    from transformers import AutoTokenizer, MBartForConditionalGeneration

    root = cache_root()
    if not (root / "target" / "config.json").is_file():
        raise SystemExit(f"no built pair under {root}: run the build phase first")
    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    target = MBartForConditionalGeneration.from_pretrained(str(root / "target")).eval()
    draft = MBartForConditionalGeneration.from_pretrained(str(root / "draft")).eval()
    for model in (target, draft):
        model.generation_config.forced_eos_token_id = None
        model.generation_config.max_length = None
    data = read_json(root / "data.json", "docstring data file")
    return root, tokenizer, target, draft, data


def sample(examples: list[dict], n: int, seed: int) -> list[dict]:
    chosen = list(examples)
    random.Random(seed).shuffle(chosen)
    return chosen[:n]


def search(args) -> None:
    from itertools import combinations

    from viasd_adapt.core.cost import routed_path_cost, routing_delta
    from viasd_adapt.io import write_json
    from viasd_adapt.config.mask import MaskArtifact, RoutingMask
    from viasd_adapt.routing.mask import model_fingerprint
    from viasd_adapt.routing.slim import SlimVerifier
    from viasd_adapt.search.candidates import FixedCountSpace
    from viasd_adapt.search.config import SearchConfig
    from viasd_adapt.search.dimr import dimr_search
    from viasd_adapt.search.report import DIMR_STRATEGY, ROUTED_OBJECTIVE
    from viasd_adapt.search.seq2seq_windows import build_seq2seq_calibration, build_seq2seq_windows
    from viasd_adapt.core.settings import TierSettings

    root, tokenizer, target, draft, data = load_built()
    tier = TierSettings()
    layers = target.config.decoder_layers
    k = round(tier.ratio * layers)
    n_calib, n_probe = (8, 8) if args.fast else (48, 48)
    calib = [encode_source(tokenizer, e["source"]) for e in sample(data["train"], n_calib, seed=11)]
    probe = [encode_source(tokenizer, e["source"]) for e in sample(data["heldout"], n_probe, seed=12)]
    started = time.perf_counter()
    calibration = build_seq2seq_calibration(target, draft, calib, new_tokens=MAX_TARGET_TOKENS, batch_size=16,
                                            pad_id=tokenizer.pad_token_id)
    windows = calibration.windows

    def slim_logp(bits, on=windows):
        return on.log_probs(SlimVerifier(target, RoutingMask.from_bits(bits)).model, 16)

    def cost(bits) -> float:
        return float(routed_path_cost(calibration.logp_full, slim_logp(bits), calibration.logp_draft,
                                      tier.alpha1, tier.alpha2, tier.beta).sum())

    config = SearchConfig(strategy="dimr", steps=12 if args.fast else 40, bo_every=5, patience=20, seed=0)
    result = dimr_search(cost, FixedCountSpace(layers, k), config)
    best = RoutingMask.from_bits(result.best.bits)
    all_masks = [tuple(0 if i in skip else 1 for i in range(layers)) for skip in combinations(range(layers), k)]
    exhaustive = sorted((cost(bits), bits) for bits in all_masks)
    rank = [bits for _, bits in exhaustive].index(tuple(best.bits())) + 1
    probe_windows = build_seq2seq_windows(target, probe, new_tokens=MAX_TARGET_TOKENS, pad_id=tokenizer.pad_token_id)
    q_argmax = probe_windows.log_probs(target).argmax(-1)

    def agreement(logp) -> float:
        return round(float((logp.argmax(-1) == q_argmax).float().mean()), 4)

    random_bits = [all_masks[i] for i in random.Random(7).sample(range(len(all_masks)), 10)]
    slim_best = slim_logp(best.bits())
    delta = float(routing_delta(calibration.logp_full, slim_best, calibration.logp_draft, alpha=tier.alpha2,
                                beta=tier.beta, alpha_slim=(tier.alpha1, tier.alpha2)).sum())
    report = {
        "tau": calibration.tau,
        "heldout_tau": probe_windows.num_scored,
        "skipped": list(best.skipped),
        "cost": round(result.best.cost, 4),
        "delta": round(delta, 4),
        "evaluations": result.evaluations,
        "exhaustive_rank": f"{rank} of {len(all_masks)}",
        "exhaustive_best": {"skipped": [i for i, b in enumerate(exhaustive[0][1]) if b == 0], "cost": round(exhaustive[0][0], 4)},
        "median_random_cost": round(sorted(cost(b) for b in random_bits)[len(random_bits) // 2], 4),
        "heldout_agreement": {
            "slim_dimr": agreement(slim_logp(best.bits(), probe_windows)),
            "drafter": agreement(probe_windows.log_probs(draft)),
            "random_masks": [agreement(slim_logp(b, probe_windows)) for b in random_bits],
        },
        "seconds": round(time.perf_counter() - started, 1),
    }
    # the mask file's search section is typed (viasd_adapt.config.search_record); this study's own
    # measurements do not fit a search report, so they go to search.json beside it
    search_section = config.strategy_record() | {
        "ratio": best.ratio, "alpha1": tier.alpha1, "alpha2": tier.alpha2, "beta": tier.beta,
        "objective": ROUTED_OBJECTIVE, "strategy": DIMR_STRATEGY,
        "calibration": {"source": f"{n_calib} train functions, target-greedy windows (source -> target)",
                        "n_calibration": n_calib, "new_tokens": MAX_TARGET_TOKENS}}
    artifact = MaskArtifact(best, ratio=tier.ratio, score=round(result.best.cost, 6), delta=round(delta, 6),
                            search=search_section, fingerprint=model_fingerprint(target))
    artifact.save(root / "mask.json")
    write_json(root / "search.json", report)
    print(json_text(report), end="")


# ============================================================================ eval


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # "ar", "stock", "engine", "hf"
    mode: str = "none"
    settings: dict | None = None


def rows_to_run() -> list[Row]:
    rows = [Row("target greedy (HF generate)", "ar"),
            Row("SD untiered, stock HF assisted", "stock"),
            Row("SD untiered, engine loop", "engine", "none")]
    rows += [Row(f"lenient a={a}", "hf", "lenient", {"lenience": a}) for a in (0.3, 0.5, 0.7, 0.9, 0.97)]
    rows += [Row("VIA-SD lossless", "hf", "lossless")]
    rows += [Row(f"VIA-SD lossy a1={a1} a2={a2}", "hf", "lossy", {"alpha1": a1, "alpha2": a2})
             for a1, a2 in ((0.2, 0.1), (0.5, 0.3), (0.7, 0.5), (0.9, 0.7))]
    rows += [Row("VIA-SD audit a1=0.5 a2=0.3", "hf", "audit", {"alpha1": 0.5, "alpha2": 0.3})]
    return rows


@torch.no_grad()
def target_loglik(target, source: torch.Tensor, tokens: list[int], start: int) -> tuple[float, int]:
    """Sum of log q(token | source, prefix) over ``tokens`` (teacher-forced), and their count."""
    if not tokens:
        return 0.0, 0
    decoder = torch.tensor([[start] + tokens[:-1]])
    logp = target(input_ids=source, decoder_input_ids=decoder).logits[0].log_softmax(-1)
    return float(logp[torch.arange(len(tokens)), torch.tensor(tokens)].sum()), len(tokens)


def pass_weights(target, draft, mask) -> dict:
    """Decoder parameters a pass reads (the weight-read cost model of small-batch decoding), and the
    ratios to a full pass. The encoder runs once per source for every row and is left out."""
    def params(module) -> int:
        return sum(p.numel() for p in module.parameters())

    decoder, head = target.get_decoder(), target.get_output_embeddings()
    layers = decoder.layers
    shared = params(decoder) - sum(params(layer) for layer in layers) + params(head)
    full = shared + sum(params(layer) for layer in layers)
    slim = shared + sum(params(layers[i]) for i in mask.retained)
    drafter = params(draft.get_decoder()) + params(draft.get_output_embeddings())
    return {"slim_over_full": slim / full, "draft_over_full": drafter / full}


def evaluate(args) -> None:
    from viasd_adapt.adapters import hf
    from viasd_adapt.io import write_json, write_text
    from viasd_adapt.config.mask import MaskArtifact
    from viasd_adapt.routing.slim import SlimVerifier
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.engine.seq2seq import seq2seq_generate
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.bench.text_scores import rouge_l_f1

    root, tokenizer, target, draft, data = load_built()
    mask = load_mask(root / "mask.json", target).mask
    examples = sample(data["heldout"], 12 if args.fast else 100, seed=13)
    start, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    config = draft.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = 5, "constant"
    config.assistant_confidence_threshold = 0.0
    weights = pass_weights(target, draft, mask)
    sources = [torch.tensor([encode_source(tokenizer, e["source"])]) for e in examples]
    kwargs = dict(max_new_tokens=MAX_TARGET_TOKENS, do_sample=False)
    greedy_tokens: list[list[int]] = []
    results = []
    for row in rows_to_run():
        settings = TierSettings(mode=row.mode, **(row.settings or {}))
        outputs, metrics = [], None
        for source in sources:
            if row.kind == "ar":
                tokens, m = target.generate(input_ids=source, **kwargs)[0, 1:].tolist(), None
            elif row.kind == "stock":
                with hf.tiered(target,
                               context=viasd_adapt.context(target, settings=TierSettings(mode="none"))) as session:
                    tokens = target.generate(input_ids=source, assistant_model=draft, **kwargs)[0, 1:].tolist()
                m = session.last_metrics
            elif row.kind == "engine":
                slim = SlimVerifier(target, mask) if settings.mode.uses_slim else None
                out = seq2seq_generate(target, draft, source, MAX_TARGET_TOKENS, settings, SamplingConfig(), slim=slim,
                                       eos_token_ids=[eos], q_prefill=False)
                tokens, m = out.tokens, out.metrics
            else:
                with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=settings)) as session:
                    tokens = target.generate(input_ids=source, assistant_model=draft, **kwargs)[0, 1:].tolist()
                m = session.last_metrics
            tokens = tokens[: tokens.index(eos) + 1] if eos in tokens else tokens  # drop right padding
            outputs.append(tokens)
            metrics = m if metrics is None or m is None else metrics.merge(m)
        if row.kind == "ar":
            greedy_tokens = outputs
        texts = [tokenizer.decode(t, skip_special_tokens=True).strip() for t in outputs]
        rouge = rouge_l_f1([e["target"] for e in examples], texts)
        loglik = [target_loglik(target, s, t, start) for s, t in zip(sources, outputs)]
        n_tokens = sum(n for _, n in loglik)
        entry = {
            "row": row.name,
            "rougeL_f1": round(100 * rouge, 2),
            "same_as_target_greedy": round(sum(o == g for o, g in zip(outputs, greedy_tokens)) / len(outputs), 3),
            "loglik_per_token": round(sum(v for v, _ in loglik) / max(n_tokens, 1), 4),
            "tokens": n_tokens,
        }
        entry.update(pass_counts(metrics, weights))
        results.append(entry)
        print(json_text(entry, indent=None), end="", flush=True)
    greedy_loglik = results[0]["loglik_per_token"]
    for entry in results:
        entry["loglik_drop"] = round(greedy_loglik - entry["loglik_per_token"], 4)
    comparison = same_budget_comparison(results)
    report = {"examples": len(examples), "mask_skipped": list(mask.skipped), "pass_weights": {k: round(v, 4) for k, v in weights.items()},
              "rows": results, "lossy_vs_lenient_at_same_fidelity": comparison,
              "build": read_json(root / "build.json", "build record"),
              "search": read_json(root / "search.json", "search record")}
    write_json(root / "eval.json", report)
    table = format_table(results)
    write_text(root / "eval.txt", table + "\n\n" + json_text(comparison))
    print(table)
    print(json_text(comparison), end="")



def pass_counts(metrics, weights: dict) -> dict:
    """A row's passes per committed token (full, slim, draft, and their full-pass equivalent under
    ``weights``) and its acceptance figures; ``metrics`` None: autoregressive, one full pass per token."""
    if metrics is None:
        return {"full_per_token": 1.0, "slim_per_token": 0.0, "draft_per_token": 0.0, "full_equiv_per_token": 1.0}
    committed = max(metrics.committed, 1)
    full, slim, drafts = metrics.full_passes / committed, metrics.slim_passes / committed, metrics.draft_passes / committed
    return {
        "full_per_token": round(full, 3), "slim_per_token": round(slim, 3), "draft_per_token": round(drafts, 3),
        "full_equiv_per_token": round(full + slim * weights["slim_over_full"] + drafts * weights["draft_over_full"], 3),
        "rejection_rate": round(metrics.rejection_rate, 3),
        "mean_accepted": round(metrics.mean_accepted_length, 2),
        "overrule_rate": None if metrics.overrule_rate is None else round(metrics.overrule_rate, 3),
    }

def same_budget_comparison(results: list[dict]) -> list[dict]:
    """For each lossy row: lenient's full-equivalent cost at the same fidelity (log-likelihood drop,
    interpolated linearly between the lenient rows around it) and at the same ROUGE-L."""
    lenient = [r for r in results if r["row"].startswith("lenient") or r["row"] == "SD untiered, engine loop"]
    out = []
    for row in (r for r in results if r["row"].startswith("VIA-SD lossy")):
        entry = {"row": row["row"], "loglik_drop": row["loglik_drop"], "rougeL_f1": row["rougeL_f1"],
                 "full_equiv_per_token": row["full_equiv_per_token"]}
        for key, better_is_lower in (("loglik_drop", True), ("rougeL_f1", False)):
            entry[f"lenient_cost_at_same_{key}"] = interpolate(lenient, key, row[key], better_is_lower)
        out.append(entry)
    return out


def interpolate(frontier: list[dict], key: str, value: float, better_is_lower: bool) -> float | None:
    """The cheapest lenient cost reaching at least ``value`` fidelity, by linear interpolation along
    lenient rows sorted by cost; None when no lenient row is as faithful."""
    points = sorted((r["full_equiv_per_token"], r[key]) for r in frontier)
    ok = (lambda v: v <= value) if better_is_lower else (lambda v: v >= value)
    best = None
    for (c0, f0), (c1, f1) in zip(points, points[1:]):
        if ok(f0):
            best = c0 if best is None else min(best, c0)
        if ok(f0) != ok(f1) and f1 != f0:
            t = (value - f0) / (f1 - f0)
            crossing = c0 + t * (c1 - c0)
            best = crossing if best is None else min(best, crossing)
    if points and ok(points[-1][1]):
        best = points[-1][0] if best is None else min(best, points[-1][0])
    return None if best is None else round(best, 3)


def format_table(results: list[dict]) -> str:
    columns = [("row", 32), ("rougeL_f1", 7), ("same_as_target_greedy", 7), ("loglik_drop", 8), ("full_per_token", 7),
               ("slim_per_token", 7), ("draft_per_token", 7), ("full_equiv_per_token", 8), ("rejection_rate", 7)]
    heads = ["row", "ROUGE-L", "=greedy", "logL drop", "full/tok", "slim/tok", "draft/tok", "full-eq/tok", "reject"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    for r in results:
        lines.append("| " + " | ".join(str(r.get(key, "")) for key, _ in columns) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["build", "search", "eval", "all"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help="tiny budgets: a smoke run of every phase")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.phase in ("build", "all"):
        build(args)
    if args.phase in ("search", "all"):
        search(args)
    if args.phase in ("eval", "all"):
        evaluate(args)


if __name__ == "__main__":
    main()
