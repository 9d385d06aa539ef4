"""Host work per cycle: each framework's loop beside stock HF assisted generation, in one run.

On a GPU a 7B forward takes milliseconds, so the loop's own work between forwards matters, and so
does every host synchronisation (``.item()``, ``.tolist()``, a Python branch on a device tensor),
which makes the host wait for the device. Both are properties of the loop's code, measured here on
a CPU with a random tiny Llama (a few hundred thousand parameters) whose forwards cost almost nothing:

* **host ms per cycle**: a run's wall time minus the time inside the models' compute modules
  (:class:`viasd_adapt.bench.host_work.ForwardTimer`: embeddings, decoder layers, norm, head; the
  slim view and a resumed pass call the same modules), over its cycles (the tier's metrics; for
  stock HF, its target forwards: one per cycle). Medians of ``--repeats`` runs, the rows
  interleaved, every row with the same hooks; the ratio is to stock HF's.
* **syncs per cycle**: the synchronising calls the loop makes outside the forwards
  (:class:`viasd_adapt.bench.host_work.SyncCounter`, a separate, untimed run), and those the models'
  own code makes inside them (the same code in every framework).

Rows: stock HF assisted generation (``hf plain``, no viasd-adapt), and each framework's tiered
path in mode ``none`` (untiered, the loop alone) and ``lossless`` with the slim tier on every cycle
(``--no-adaptive``), with the same drafter, the same greedy decoding and the same tokens.

    python benchmarks/host_overhead.py                # about a minute on one CPU thread
    python benchmarks/host_overhead.py --json benchmarks/results/host_overhead.json
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viasd_adapt.bench.host_work import counting_syncs, timing_forwards  # noqa: E402
from viasd_adapt.config.mask import RoutingMask  # noqa: E402
from viasd_adapt.core.settings import TierSettings  # noqa: E402
from viasd_adapt.frameworks import registry  # noqa: E402
from viasd_adapt.frameworks.requests import RunRequest  # noqa: E402
from viasd_adapt.io import write_json  # noqa: E402
from viasd_adapt.models.pair import LoadedPair, MaskInfo  # noqa: E402

#: (framework, mode): stock HF first (the reference), then each framework's tiered path.
ROWS = [("hf", "plain"), ("hf", "none"), ("hf", "lossless"), ("engine", "none"), ("engine", "lossless"),
        ("pearl", "none"), ("pearl", "lossless")]


def tiny_llama(layers: int, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def tiny_pair(layers: int) -> LoadedPair:
    target = tiny_llama(layers, 0)
    drafter = tiny_llama(1, 1)
    mask = RoutingMask.from_skipped(layers, range(layers // 2, layers))
    return LoadedPair(target, drafter, None, MaskInfo(mask, "half the layers", True), torch.device("cpu"))


def request_for(mode: str, prompt: list[int], tokens: int, gamma: int) -> RunRequest:
    settings = TierSettings(mode="lossless" if mode == "plain" else mode, gamma=gamma, adaptive=False)
    if mode == "plain":
        return RunRequest.stock_run(prompt, tokens, settings, stop_at_eos=False)
    return RunRequest.tiered(prompt, tokens, settings, stop_at_eos=False)


class TargetCalls:
    """Counts the target's top-level forwards: stock HF's cycles (one target forward each)."""

    def __init__(self, target: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = target.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        self.calls += 1


def one_run(pair: LoadedPair, framework: str, mode: str, prompt: list[int], tokens: int, gamma: int,
            count_syncs: bool = False) -> dict:
    counter = TargetCalls(pair.target)
    request = request_for(mode, prompt, tokens, gamma)
    try:
        with timing_forwards(pair.target, pair.draft) as forwards:
            if count_syncs:
                with counting_syncs(forwards) as syncs:
                    out = registry.run(framework, pair, request)
            else:
                start = time.perf_counter()
                out = registry.run(framework, pair, request)
                wall = time.perf_counter() - start
    finally:
        counter.handle.remove()
    cycles = out.metrics.cycles if out.metrics is not None and out.metrics.cycles else counter.calls
    row = {"tokens": out.tokens, "cycles": cycles}
    if count_syncs:
        row.update(loop_syncs=syncs.loop, forward_syncs=syncs.forwards, sync_names=dict(syncs.by_name))
    else:
        row.update(wall=wall, forward_seconds=forwards.seconds, host_seconds=wall - forwards.seconds)
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--frameworks", default=None, help="comma-separated names to keep (default: all rows)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    pair = tiny_pair(args.layers)
    prompt = torch.randint(3, 128, (args.prompt_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    keep = set(args.frameworks.split(",")) if args.frameworks else None
    rows = [(f, m) for f, m in ROWS if keep is None or f in keep or (f, m) == ROWS[0]]
    runs = {row: [] for row in rows}
    reference_tokens = None
    for row in rows:  # warm-up, the outputs compared, and the synchronisations counted
        one_run(pair, *row, prompt, args.max_new_tokens, args.gamma)
        counted = one_run(pair, *row, prompt, args.max_new_tokens, args.gamma, count_syncs=True)
        reference_tokens = reference_tokens or counted["tokens"]
        if counted["tokens"] != reference_tokens:
            raise SystemExit(f"{row}: not the same tokens as stock HF (greedy, lossless): the rows do not compare")
        runs[row].append(counted)
    for _ in range(args.repeats):  # interleaved, so that drift on a shared machine hits every row alike
        for row in rows:
            runs[row].append(one_run(pair, *row, prompt, args.max_new_tokens, args.gamma))

    table = []
    for (framework, mode), found in runs.items():
        counted, timed = found[0], found[1:]
        cycles = timed[0]["cycles"]
        table.append({
            "framework": framework, "mode": mode, "cycles": cycles,
            "host_ms_per_cycle": 1e3 * statistics.median(r["host_seconds"] / r["cycles"] for r in timed),
            "forward_ms_per_cycle": 1e3 * statistics.median(r["forward_seconds"] / r["cycles"] for r in timed),
            "wall_ms": 1e3 * statistics.median(r["wall"] for r in timed),
            "loop_syncs_per_cycle": counted["loop_syncs"] / counted["cycles"],
            "forward_syncs_per_cycle": counted["forward_syncs"] / counted["cycles"],
            "loop_sync_calls": counted["sync_names"],
        })
    stock = table[0]["host_ms_per_cycle"]
    for entry in table:
        entry["host_ratio_to_stock_hf"] = entry["host_ms_per_cycle"] / stock

    import transformers
    print(f"tiny Llama target ({args.layers} layers, hidden 32), 1-layer drafter, gamma {args.gamma}, "
          f"{args.prompt_tokens}-token prompt + {args.max_new_tokens} tokens, greedy, {args.threads} thread(s), "
          f"medians of {args.repeats}; torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"{'row':<18}{'cycles':>7}{'host ms/cyc':>13}{'x stock hf':>11}{'fwd ms/cyc':>12}"
          f"{'loop syncs/cyc':>16}{'fwd syncs/cyc':>15}")
    for e in table:
        print(f"{e['framework'] + ' ' + e['mode']:<18}{e['cycles']:>7}{e['host_ms_per_cycle']:>13.3f}"
              f"{e['host_ratio_to_stock_hf']:>11.2f}{e['forward_ms_per_cycle']:>12.3f}"
              f"{e['loop_syncs_per_cycle']:>16.2f}{e['forward_syncs_per_cycle']:>15.2f}")
    for e in table:
        print(f"  {e['framework']} {e['mode']} loop syncs: {e['loop_sync_calls']}")
    result = {"args": vars(args) | {"json": None}, "machine": platform.machine(), "torch": torch.__version__,
              "transformers": transformers.__version__, "rows": table}
    if args.json:
        write_json(args.json, result, what="host-overhead table")
    return result


if __name__ == "__main__":
    main()
