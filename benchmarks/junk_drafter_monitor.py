"""The drafter-quality monitor's evidence on good and junk drafters, and the rule chosen from it.

The monitor (``viasd_adapt/core/monitor.py``) warns when lossy mode commits a junk drafter's tokens.
Its first rule looks only at the drafts gate 1 *committed*: 12 of them (or 4 with none agreeing
with the slim verifier's choice). A junk drafter's drafts are mostly rejected, so a random-weights
drafter could change most of a 64-token output without 4 commits to judge. This script records,
per cycle, what the slim verifier u says about *every* draft gate 1 judged (committed or not): its
greedy agreement (is the draft u's argmax?) and its surprise excess (``log u(x) + H(u)``: 0 on
average for tokens drawn from u), with the committed drafts' figures beside them, on

* good pairs: the shipped ``demo`` and ``demo-ee`` pairs (their drafters), SmolLM2 with its
  shipped drafter, and SmolLM2 and demo with prompt lookup (a point-mass drafter: u's agreement
  with a copied n-gram says nothing about a drafter model, and gate 1 commits a point mass only
  where u is confident, so the judged rule does not apply to it);
* junk drafters of each pair's vocabulary: random weights of the drafter's architecture (two
  seeds), and the pair's own drafter with its vocabulary permuted (a trained LM whose ids mean other
  strings: a drafter for another model with the same vocabulary size);

in greedy decoding and sampling (temperature 1), in lossy mode with the default settings, 64 new
tokens per prompt (the bench's budget): the demo pairs on the bench split of held-out stdlib
snippets, SmolLM2 on first turns of Spec-Bench's bench split. Then it replays every candidate
rule on the recorded trajectories, cycle by cycle as the monitor sees them, and reports per rule
its false-alarm rate (share of good generations it warns on) and detection rate (share of junk
generations it warns on).

    python benchmarks/junk_drafter_monitor.py measure --json benchmarks/results/junk_drafter_monitor_raw.json
    python benchmarks/junk_drafter_monitor.py report benchmarks/results/junk_drafter_monitor_raw.json \
        --json benchmarks/results/junk_drafter_monitor.json > benchmarks/results/junk_drafter_monitor.txt

About 40 minutes on 2 CPU cores (SmolLM2 dominates).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from viasd_adapt.core.markers import hookimpl
from viasd_adapt.core.monitor import JunkThresholds, ViasdQualityWarning, wilson_upper
from viasd_adapt.core.tiers import Tier

NEW_TOKENS = 64
SAMPLINGS = {"greedy": dict(do_sample=False), "T=1": dict(do_sample=True, temperature=1.0)}


# ----------------------------------------------------------------------------- recording


class CycleRecorder:
    """A plugin that records, per cycle, u's view of every draft gate 1 judged and of the committed ones."""

    def __init__(self) -> None:
        self.cycles: list[list] = []
        self._gate: tuple | None = None

    @hookimpl(wrapper=True)
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        self._gate = (tokens.detach().cpu(), p.detach().float().cpu(), u.detach().float().cpu())
        return (yield)

    @hookimpl
    def viasd_cycle_finished(self, cycle, metrics):
        gate, self._gate = self._gate, None
        tiers = [int(t) for t in cycle.tiers]
        committed = 0
        while committed < len(tiers) and tiers[committed] == Tier.DRAFT:
            committed += 1
        if gate is None:
            self.cycles.append([0, 0, 0.0, 0, 0, 0.0, 0])
            return
        tokens, p, u = gate
        u = u[: tokens.shape[0]]
        agree = (u.argmax(dim=-1) == tokens)
        u_x = u.gather(-1, tokens[:, None]).squeeze(-1)
        excess = -(u * u.clamp_min(1e-30).log()).sum(-1) + u_x.clamp_min(1e-30).log()
        point_mass = int(bool((p[: tokens.shape[0]].max(dim=-1).values >= 1 - 1e-6).all()))
        self.cycles.append([int(tokens.shape[0]), int(agree.sum()), round(float(excess.sum()), 4), committed,
                            int(agree[:committed].sum()), round(float(excess[:committed].sum()), 4), point_mass])


@dataclass
class Case:
    pair: str
    drafter: str  # own, prompt-lookup, random-0, random-1, permuted
    good: bool


def _permuted(drafter: torch.nn.Module, seed: int) -> torch.nn.Module:
    """The drafter with its token ids permuted (input embeddings and output head alike): the same
    language model over another id mapping, as a drafter trained with another tokenizer of the
    same size would be."""
    clone = copy.deepcopy(drafter)
    vocab = clone.get_input_embeddings().weight.shape[0]
    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        embeddings = clone.get_input_embeddings().weight
        head = clone.get_output_embeddings().weight
        if head.data_ptr() == embeddings.data_ptr():
            embeddings.copy_(embeddings[order])
        else:
            embeddings.copy_(embeddings[order])
            head.copy_(head[order])
        bias = getattr(clone.get_output_embeddings(), "bias", None)
        if bias is not None:
            bias.copy_(bias[order])
    return clone


def _random(drafter: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A model of the drafter's architecture and config with freshly initialised weights."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(drafter.config).eval()


def _prompts(name: str, pair, count: int) -> list[list[int]]:
    """The bench split: held-out stdlib snippets (the code pairs), Spec-Bench first turns (SmolLM2)."""
    from viasd_adapt.prompts.chat import encode_prompt
    from viasd_adapt.prompts.splits import bench_questions, bench_snippets

    if name == "smollm2":
        questions = bench_questions(per_category=-(-count // 6))
        return [encode_prompt(pair.tokenizer, q.turns[0], "auto") for q in questions][:count]
    return [encode_prompt(pair.tokenizer, text, "auto") for text in bench_snippets(count)]


def measure(pairs: list[str], prompts: int, say) -> list[dict]:
    from viasd_adapt.core.hooks import make_plugin_manager
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.engine.drafters import ModelDrafter
    from viasd_adapt.engine.loop import speculative_generate
    from viasd_adapt.engine.prompt_lookup import PromptLookupSpec
    from viasd_adapt.engine.verifier import TieredVerifier
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.routing.slim import SlimVerifier

    records = []
    settings = TierSettings(mode="lossy")
    for name in pairs:
        paths = resolve_pair(name)
        pair = load_pair(paths.target, paths.draft, paths.mask, device="cpu")
        slim = SlimVerifier(pair.target, pair.routing)
        ids = _prompts(name, pair, prompts)
        vocab = pair.target.get_output_embeddings().weight.shape[0]
        drafters = {"own": (pair.draft, True), "prompt-lookup": (None, True),
                    "random-0": (_random(pair.draft, 0), False), "random-1": (_random(pair.draft, 1), False),
                    "permuted": (_permuted(pair.draft, 0), False)}
        for drafter_name, (model, good) in drafters.items():
            for sampling_name, options in SAMPLINGS.items():
                sampling = SamplingConfig(**options)
                started = time.perf_counter()
                for index, prompt in enumerate(ids):
                    recorder = CycleRecorder()
                    verifier = TieredVerifier(pair.target, settings, sampling, slim=slim,
                                              plugin_manager=make_plugin_manager([recorder], load_entrypoints=False))
                    drafter = (ModelDrafter(model, sampling) if model is not None
                               else PromptLookupSpec().drafter(vocab, (), pair.device))
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", ViasdQualityWarning)
                        out = speculative_generate(drafter, verifier, prompt, NEW_TOKENS, (),
                                                   generator=torch.Generator().manual_seed(index))
                    warned = any(issubclass(w.category, ViasdQualityWarning) for w in caught)
                    records.append({"pair": name, "drafter": drafter_name, "good": good, "sampling": sampling_name,
                                    "prompt": index, "tokens": len(out.tokens), "monitor_warned": warned,
                                    "tiers": "".join(str(int(t)) for t in out.metrics.token_tiers),
                                    "cycles": recorder.cycles})
                say(f"{name} / {drafter_name} / {sampling_name}: {len(ids)} prompts in {time.perf_counter() - started:.0f}s")
    return records


# ----------------------------------------------------------------------------- replaying rules


@dataclass(frozen=True)
class Rule:
    """A candidate rule: the committed-drafts rule of the monitor's thresholds, plus (when
    ``judged_min`` is set) a judged-drafts rule: from ``judged_min`` judged drafts of a drafter that
    is not a point mass, greedy warns when the upper 95% Wilson bound of their agreement with u is
    below ``judged_agreement``, sampling when their mean surprise excess is at most ``judged_excess``."""

    name: str
    thresholds: JunkThresholds = JunkThresholds()
    judged_min: int | None = None
    judged_agreement: float = 0.0
    judged_excess: float = float("-inf")


def first_warning(rule: Rule, cycles: list[list], greedy: bool) -> int | None:
    """The cycle (0-based) after which ``rule`` first warns on this trajectory, or None."""
    t = rule.thresholds
    judged = agree = committed = committed_agree = 0
    excess = committed_excess = 0.0
    point_mass = True
    for number, (n, a, e, c, ca, ce, pm) in enumerate(cycles):
        judged, agree, excess = judged + n, agree + a, excess + e
        committed, committed_agree, committed_excess = committed + c, committed_agree + ca, committed_excess + ce
        point_mass = point_mass and (pm == 1 or n == 0)
        if committed >= t.min_committed:
            if (committed_agree / committed <= t.max_agreement) if greedy else (committed_excess / committed <= t.max_surprise_excess):
                return number
        elif committed >= t.min_committed_strong:
            if (wilson_upper(committed_agree, committed) < t.max_agreement) if greedy \
                    else (committed_excess / committed <= 2 * t.max_surprise_excess):
                return number
        if rule.judged_min is not None and not point_mass and judged >= rule.judged_min:
            if (wilson_upper(agree, judged) < rule.judged_agreement) if greedy else (excess / judged <= rule.judged_excess):
                return number
    return None


def evaluate(records: list[dict], rules: list[Rule]) -> dict:
    table = {}
    for rule in rules:
        rows = {}
        for record in records:
            key = f"{record['pair']} / {record['drafter']} / {record['sampling']}"
            row = rows.setdefault(key, {"good": record["good"], "generations": 0, "warned": 0, "first_cycle": []})
            hit = first_warning(rule, record["cycles"], record["sampling"] == "greedy")
            row["generations"] += 1
            if hit is not None:
                row["warned"] += 1
                row["first_cycle"].append(hit)
        for kind in ("good", "junk"):
            chosen = [r for r in rows.values() if r["good"] == (kind == "good")]
            total = sum(r["generations"] for r in chosen)
            rows[f"ALL {kind}"] = {"good": kind == "good", "generations": total, "warned": sum(r["warned"] for r in chosen),
                                   "first_cycle": []}
        table[rule.name] = rows
    return table


def evidence_summary(records: list[dict]) -> dict:
    """Per (pair, drafter, sampling): the range over generations of the whole generation's judged
    and committed evidence (agreement, mean surprise excess) and of the drafts committed."""
    groups: dict[str, list] = {}
    for record in records:
        cycles = record["cycles"]
        n = sum(c[0] for c in cycles)
        a = sum(c[1] for c in cycles)
        e = sum(c[2] for c in cycles)
        c_n = sum(c[3] for c in cycles)
        c_a = sum(c[4] for c in cycles)
        groups.setdefault(f"{record['pair']} / {record['drafter']} / {record['sampling']}", []).append(
            (a / n if n else None, e / n if n else None, c_n, c_a / c_n if c_n else None))
    summary = {}
    for key, values in groups.items():
        def span(index, digits=2):
            present = [v[index] for v in values if v[index] is not None]
            return [round(min(present), digits), round(max(present), digits)] if present else None
        summary[key] = {"judged_agreement": span(0), "judged_excess": span(1), "committed": span(2, 0),
                        "committed_agreement": span(3)}
    return summary


#: The rules compared; the last is the monitor's (its docstring states its rates from this report).
RULES = [
    Rule("committed only (the monitor before)"),
    Rule("judged: >=10, agreement < 0.2 / excess <= -3.0", judged_min=10, judged_agreement=0.2, judged_excess=-3.0),
    Rule("judged: >=10, agreement < 0.3 / excess <= -2.5", judged_min=10, judged_agreement=0.3, judged_excess=-2.5),
    Rule("judged: >=15, agreement < 0.25 / excess <= -3.0", judged_min=15, judged_agreement=0.25, judged_excess=-3.0),
    Rule("judged: >=20, agreement < 0.3 / excess <= -3.0", judged_min=20, judged_agreement=0.3, judged_excess=-3.0),
]


def report(records: list[dict], out=sys.stdout) -> dict:
    table = evaluate(records, RULES)
    summary = evidence_summary(records)
    print(f"{len(records)} generations of {NEW_TOKENS} tokens, lossy mode, default settings\n", file=out)
    print("evidence per generation (min..max over prompts): judged agreement, judged mean surprise excess (nats), "
          "drafts committed, committed agreement", file=out)
    for key, row in summary.items():
        print(f"  {key:<40} {row['judged_agreement']}  {row['judged_excess']}  {row['committed']}  "
              f"{row['committed_agreement']}", file=out)
    for name, rows in table.items():
        print(f"\nrule: {name}", file=out)
        for key, row in rows.items():
            share = row["warned"] / row["generations"] if row["generations"] else 0.0
            label = "false alarms" if row["good"] else "detected"
            first = f", first at cycle {min(row['first_cycle'])}-{max(row['first_cycle'])}" if row["first_cycle"] else ""
            print(f"  {key:<40} {label:<12} {row['warned']:>3}/{row['generations']:<3} ({share:.0%}){first}", file=out)
    return {"new_tokens": NEW_TOKENS, "generations": len(records), "evidence": summary,
            "rules": {name: {key: {k: v for k, v in row.items() if k != "first_cycle"} for key, row in rows.items()}
                      for name, rows in table.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--pairs", default="demo,demo-ee,smollm2")
    run.add_argument("--prompts", type=int, default=24)
    run.add_argument("--json", type=Path, required=True)
    summarise = sub.add_parser("report")
    summarise.add_argument("raw", type=Path)
    summarise.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "measure":
        records = measure(args.pairs.split(","), args.prompts, lambda m: print(m, file=sys.stderr, flush=True))
        args.json.write_text(json.dumps(records) + "\n")
        return
    records = json.loads(args.raw.read_text())
    data = report(records)
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
