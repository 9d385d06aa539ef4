"""Step 1 of the vLLM anchor, run in the PROJECT's env: what vLLM must be fed to be comparable.

Writes one JSON with
* the exported model folder (the smollm2 GGUF dequantized to a float32 ``save_pretrained`` folder by
  :func:`viasd_adapt.models.gguf.gguf_model_folder`: vLLM reads safetensors folders, and the same
  folder means the same weights as the project's rows);
* the prompt token ids ``viasd bench --prompts spec-bench --per-category N`` feeds its rows (chat
  template applied, MT-bench second turns after the target's own first answer), so vLLM sees the
  very same ids instead of re-tokenising text;
* the project's AR output for each prompt (the ``ar`` row: HF greedy, stop at EOS), the reference
  vLLM's outputs are compared with position by position.

Why a separate step: vLLM lives in its own env (it pins transformers < 5.20), and the reference
must come from the project's code path, not from vLLM.

    python benchmarks/vllm/prepare.py --out /tmp/viasd_vllm_prompts.json [--per-category 2] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from viasd_adapt.config.schema import read_json
from viasd_adapt.io import json_text, write_text


def export_draft(draft: Path, target_folder: Path, out: Path) -> None:
    """The project's shared-embedding drafter as a plain Llama folder for vLLM's ``draft_model``.

    APPROXIMATE, and said so in the folder's ``viasd_export.json``: the project's drafter reads the
    target's embeddings (copied in here, tied to the LM head, as in the target) and adds a learned
    logit bias over a restricted drafting vocabulary (``viasd.draft_vocab_bias``). vLLM's Llama has
    no logit bias and no vocabulary restriction for a draft model, so both are dropped: vLLM runs
    a *different* drafter (same layers, full vocabulary, no bias). Its rows are still lossless SD
    (the output is the target's); only how many drafts it gets accepted differs.
    """
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    if not (draft / "model.safetensors").is_file():
        raise SystemExit(f"{draft} has no model.safetensors: not a trained drafter folder")
    tensors = {}
    dropped = []
    with safe_open(str(draft / "model.safetensors"), framework="pt") as handle:
        for key in handle.keys():
            if key.startswith("viasd."):
                dropped.append(key)
            else:
                tensors[key] = handle.get_tensor(key).float()
    if "model.embed_tokens.weight" not in tensors:
        with safe_open(str(target_folder / "model.safetensors"), framework="pt") as handle:
            tensors["model.embed_tokens.weight"] = handle.get_tensor("model.embed_tokens.weight").float()
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    config = read_json(draft / "config.json", "drafter config")
    config["tie_word_embeddings"] = True
    config["torch_dtype"] = config["dtype"] = "float32"
    write_text(out / "config.json", json_text(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                 "generation_config.json"):
        if (target_folder / name).is_file():
            shutil.copy(target_folder / name, out / name)
    write_text(out / "viasd_export.json", json_text({
        "source": str(draft), "approximate": True, "dropped": dropped,
        "why": "vLLM's Llama draft model has no logit bias and no drafting-vocabulary restriction"}))
    print(f"wrote {out} (APPROXIMATE drafter: dropped {', '.join(dropped) or 'nothing'})")


def write_stand_in(pair, path: str, lenience: float, name: str) -> None:
    """A tuned.json that says plainly it was not tuned: the lenient rule at ``lenience`` with this
    target's fingerprint, so the vLLM plugin's model check and rule run on a pair the tuner has not
    measured yet. Its ``measured`` block is empty: there is no tuned fidelity to compare with."""
    from viasd_adapt.routing.mask import model_fingerprint
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.config.tuned import TunedSettings

    tuned = TunedSettings(TierSettings(mode="lenient", lenience=lenience), "lenient", None, model_fingerprint(pair.target),
                          {}, {}, {"stand_in": f"not measured by `viasd tune` on {name}; lenience {lenience} copied from "
                                               "the demo pairs' tuning (benchmarks/vllm/prepare.py --tuned-out)"})
    tuned.save(path)
    print(f"wrote stand-in tuned settings {path} (lenience {lenience}, NOT tuned on {name})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="smollm2")
    parser.add_argument("--prompts", default="spec-bench")
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=None, help="keep only the first N prompts (quick runs)")
    parser.add_argument("--out", default=None, help="the prompts/AR JSON for run_vllm.py")
    parser.add_argument("--tuned-out", default=None,
                        help="also write a STAND-IN tuned.json for the pair's target (lenient at --lenience, the "
                             "target's fingerprint), for a pair `viasd tune` has not been run on yet")
    parser.add_argument("--export-draft", default=None, metavar="DIR",
                        help="write the pair's trained drafter as a standalone folder vLLM's draft_model proposer "
                             "loads (APPROXIMATE: see export_draft)")
    parser.add_argument("--lenience", type=float, default=0.4,
                        help="the stand-in's lenience (0.4: what `viasd tune` chose on both demo pairs)")
    args = parser.parse_args(argv)
    if not args.out and not args.tuned_out and not args.export_draft:
        parser.error("nothing to do: give --out, --tuned-out and/or --export-draft")

    import torch

    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.bench.prompt_sets import spec_bench_prompts
    from viasd_adapt.models.gguf import gguf_model_folder, is_gguf_path
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.core.settings import TierSettings

    torch.set_num_threads(1)
    paths = resolve_pair(args.pair)
    if paths.target is None:
        raise SystemExit(f"pair {args.pair!r} has no target installed: {paths}")
    folder = gguf_model_folder(paths.target) if is_gguf_path(paths.target) else Path(paths.target)
    if args.export_draft:
        export_draft(Path(paths.draft), folder, Path(args.export_draft))
        if not args.out and not args.tuned_out:
            return 0
    pair = load_pair(paths.target, None, need_mask=False, device="cpu")
    if args.tuned_out:
        write_stand_in(pair, args.tuned_out, args.lenience, args.pair)
    if not args.out:
        return 0
    prompts = spec_bench_prompts(pair, args.prompts, args.per_category, "auto", args.max_new_tokens)
    if args.limit:
        prompts = prompts[: args.limit]
    rows = []
    for prompt in prompts:
        request = RunRequest("none", list(prompt.ids), args.max_new_tokens, TierSettings(mode="none"), stop_at_eos=True)
        start = time.perf_counter()
        tokens = frameworks.run("ar", pair, request).tokens
        rows.append({"label": prompt.label, "task": prompt.group, "prompt_ids": list(prompt.ids),
                     "ar_tokens": tokens, "ar_seconds": time.perf_counter() - start})
        print(f"  {prompt.label}: {len(prompt.ids)} prompt ids, {len(tokens)} AR tokens")
    out = {"pair": args.pair, "model_folder": str(folder), "prompts_spec": args.prompts, "per_category": args.per_category,
           "max_new_tokens": args.max_new_tokens, "eos_token_ids": sorted(pair.eos_token_ids), "prompts": rows,
           "command": "viasd bench --pair %s --prompts %s --per-category %d --max-new-tokens %d"
                      % (args.pair, args.prompts, args.per_category, args.max_new_tokens)}
    write_text(args.out, json_text(out))
    print(f"wrote {args.out}: {len(rows)} prompts, model folder {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
