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

    python benchmarks/junk_drafter_monitor.py measure --pairs demo,demo-ee --eagle demo --json raw_code.json
    python benchmarks/junk_drafter_monitor.py measure --pairs smollm2 --prompts 12 --json raw_smollm2.json
    python benchmarks/junk_drafter_monitor.py report raw_code.json raw_smollm2.json \
        --json benchmarks/results/junk_drafter_monitor.json > benchmarks/results/junk_drafter_monitor.txt

About 70 minutes on 2 CPU cores (SmolLM2: 12 Spec-Bench questions, two per task, 45 minutes).
The raw trajectories are kept in ``benchmarks/results/junk_drafter_monitor_raw.json`` (``report``
reads them back; every rule of :data:`RULES` is a replay, nothing is generated again).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import viasd_adapt
from viasd_adapt.core.markers import hookimpl
from viasd_adapt.core.monitor import DrafterEvidence, JunkThresholds, ViasdQualityWarning, looks_like_junk
from viasd_adapt.core.tiers import Tier
from viasd_adapt.config.schema import read_json
from viasd_adapt.io import write_json

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
    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))  # id v now means what order[v] meant
    inverse = torch.argsort(order)
    head = clone.get_output_embeddings()
    with torch.no_grad():
        embeddings = clone.get_input_embeddings().weight
        tied = isinstance(getattr(head, "weight", None), torch.Tensor) and head.weight.data_ptr() == embeddings.data_ptr()
        embeddings.copy_(embeddings[order])
        if hasattr(head, "token_ids"):  # a drafting-vocabulary head (the smollm2 drafter): its rows keep their scores
            head.token_ids.copy_(inverse[head.token_ids])
        elif not tied:
            head.weight.copy_(head.weight[order])
            if getattr(head, "bias", None) is not None:
                head.bias.copy_(head.bias[order])
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
    from viasd_adapt.engine.context import open_context
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
                    context = open_context(pair.target, slim.mask, settings,
                                           plugin_manager=make_plugin_manager([recorder], load_entrypoints=False))
                    verifier = TieredVerifier.of(context, context.verify_step("engine"), sampling)
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


def measure_eagle(name: str, prompts: int, say) -> list[dict]:
    """The same records for EAGLE (the pair's shipped head, and the head with random weights): the
    monitor sees the drafts of the path the verifier picked in each cycle's tree."""
    from viasd_adapt.adapters import eagle
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import resolve_pair

    paths = resolve_pair(name)
    pair = load_pair(paths.target, paths.draft, paths.mask, device="cpu")
    ids = _prompts(name, pair, prompts)
    records = []
    for head_name, good in (("eagle-head", True), ("eagle-random-head", False)):
        ea_model = eagle.load_ea_model(paths.target, paths.eagle_head)
        if not good:
            torch.manual_seed(0)
            with torch.no_grad():
                for param_name, param in ea_model.ea_layer.named_parameters():
                    if "embed_tokens" not in param_name:  # the head's own weights; the embedding is the target's
                        param.normal_(0.0, 0.02)
        for sampling_name, temperature in (("greedy", 0.0), ("T=1", 1.0)):
            started = time.perf_counter()
            for index, prompt in enumerate(ids):
                recorder = CycleRecorder()
                torch.manual_seed(index)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", ViasdQualityWarning)
                    out = eagle.generate(ea_model, torch.tensor([prompt]), NEW_TOKENS,
                                         context=viasd_adapt.context(ea_model,
                                                                     mask=pair.routing,
                                                                     settings=TierSettings(mode="lossy"),
                                                                     plugins=[recorder]), temperature=temperature, stop_at_eos=False)
                warned = any(issubclass(w.category, ViasdQualityWarning) for w in caught)
                records.append({"pair": name, "drafter": head_name, "good": good, "sampling": sampling_name,
                                "prompt": index, "tokens": len(out.tokens), "monitor_warned": warned,
                                "tiers": "".join(str(int(t)) for t in out.tiers), "cycles": recorder.cycles,
                                "eagle": True})
            say(f"{name} / {head_name} / {sampling_name}: {len(ids)} prompts in {time.perf_counter() - started:.0f}s")
    return records


# ----------------------------------------------------------------------------- replaying rules


@dataclass(frozen=True)
class Rule:
    """A candidate rule: the monitor's thresholds for drafter models and for EAGLE heads."""

    name: str
    thresholds: JunkThresholds = JunkThresholds()
    eagle: JunkThresholds = JunkThresholds()


def first_warning(thresholds: JunkThresholds, cycles: list[list], greedy: bool) -> int | None:
    """The cycle (0-based) after which the monitor's rule (:func:`viasd_adapt.core.monitor.looks_like_junk`)
    with ``thresholds`` first warns on this recorded trajectory, or None."""
    evidence = DrafterEvidence()
    for number, (n, a, e, c, ca, ce, pm) in enumerate(cycles):
        if n == 0:
            continue
        evidence.judged += n
        evidence.judged_agreeing += a
        evidence.judged_surprise_excess += e
        evidence.committed += c
        evidence.agreeing += ca
        evidence.surprise_excess += ce
        evidence.point_mass = evidence.point_mass and pm == 1
        if looks_like_junk(evidence, thresholds, greedy) is not None:
            return number
    return None


def evaluate(records: list[dict], rules: list[Rule]) -> dict:
    table = {}
    for rule in rules:
        rows = {}
        for record in records:
            key = f"{record['pair']} / {record['drafter']} / {record['sampling']}"
            row = rows.setdefault(key, {"good": record["good"], "generations": 0, "warned": 0, "first_cycle": []})
            thresholds = rule.eagle if record.get("eagle") else rule.thresholds
            hit = first_warning(thresholds, record["cycles"], record["sampling"] == "greedy")
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


def _rule(name: str, **judged) -> Rule:
    """The monitor's committed-drafts thresholds (drafter models and EAGLE heads) with ``judged`` ones."""
    from viasd_adapt.adapters.eagle.session import EAGLE_THRESHOLDS

    base = JunkThresholds(min_judged=None)
    eagle = replace(EAGLE_THRESHOLDS, min_judged=None)
    eagle_judged = dict(judged, min_judged=max(judged["min_judged"], 40)) if judged else {}
    return Rule(name, replace(base, **judged), replace(eagle, **eagle_judged))


#: The rules compared: the committed drafts only (the monitor before), then the judged drafts'
#: mean surprise excess (greedy and sampling alike), from ``min_judged`` judged drafts (at least 40
#: for EAGLE, whose cycles judge a whole path), at or below a threshold.
RULES = [_rule("committed only (the monitor before)")] + [
    _rule(f"judged >= {count}: mean excess <= {excess}", min_judged=count, max_judged_surprise_excess=excess)
    for count in (10, 20, 30) for excess in (-4.5, -5.0, -5.5, -6.0)
]


def monitor_rule() -> Rule:
    """The monitor's own thresholds, as shipped (its defaults; EAGLE's from the EAGLE adapter)."""
    from viasd_adapt.adapters.eagle.session import EAGLE_THRESHOLDS

    return Rule("the monitor as shipped", JunkThresholds(), EAGLE_THRESHOLDS)


def report(records: list[dict], out=sys.stdout) -> dict:
    table = evaluate(records, RULES + [monitor_rule()])
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
    run.add_argument("--eagle", default="", help="pairs whose shipped EAGLE head is measured too (e.g. demo)")
    run.add_argument("--json", type=Path, required=True)
    summarise = sub.add_parser("report")
    summarise.add_argument("raw", type=Path, nargs="+")
    summarise.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "measure":
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        records = measure([p for p in args.pairs.split(",") if p], args.prompts, say)
        for name in [p for p in args.eagle.split(",") if p]:
            records += measure_eagle(name, args.prompts, say)
        write_json(args.json, records)
        return
    records = [record for path in args.raw for record in read_json(path, "raw monitor records")]
    data = report(records)
    if args.json is not None:
        write_json(args.json, data)


if __name__ == "__main__":
    main()
