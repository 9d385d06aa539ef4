"""An example viasd-adapt plugin: an entropy-based router plus a tier-counting observer.

The built-in router lets the slim verifier resolve a rejected position on its own when its top
probability is at least ``1 - alpha2``. This plugin replaces that with a normalised-entropy score:
u is trusted when its whole distribution is concentrated, not just its top token. A second plugin
only watches: it counts committed tokens per tier and prints a summary every ``every`` cycles.

Run it on tiny random models (no download, a few seconds on a CPU)::

    python examples/plugin_example.py

To ship a plugin like this in your own package, expose a module or an *instance* (pluggy registers
the object the entry point names, so name an object, not a class) through the ``viasd_adapt``
entry-point group in your ``pyproject.toml``::

    [project.entry-points.viasd_adapt]
    entropy_router = "my_package.routers:entropy_router"   # entropy_router = EntropyRouter(0.6)
"""

from __future__ import annotations

import math
from collections import Counter

import torch

import viasd_adapt
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.core.hooks import hookimpl, make_plugin_manager
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier


class EntropyRouter:
    """Routes by the slim verifier's normalised entropy instead of its top probability.

    confidence = 1 - H(u) / log V, in [0, 1]; the slim tier resolves a position when the confidence
    reaches ``threshold``. Returning a value (not None) makes pluggy stop at this plugin, so the
    built-in router is never consulted.
    """

    def __init__(self, threshold: float = 0.6):
        self.threshold = threshold

    @hookimpl
    def viasd_slim_confidence(self, p, u, settings):
        entropy = -(u * u.clamp_min(1e-30).log()).sum(dim=-1)
        return 1.0 - entropy / math.log(u.shape[-1])

    @hookimpl
    def viasd_slim_resolves(self, confidence, settings):
        return confidence >= self.threshold


class TierCounter:
    """Observes every committed token and prints the running tier counts."""

    def __init__(self, every: int = 0):
        self.counts: Counter[str] = Counter()
        self.events = []
        self.every = every

    @hookimpl
    def viasd_token_decided(self, event):
        self.events.append(event)
        self.counts[Tier(event.tier).name] += 1

    @hookimpl
    def viasd_cycle_finished(self, cycle, metrics):
        if self.every and metrics.cycles % self.every == 0:
            print(f"after {metrics.cycles} cycles: {dict(self.counts)}")


def run_example(max_new_tokens: int = 48, threshold: float = 0.6, verbose: bool = True) -> dict:
    """Generates with the two plugins on a tiny random Llama; returns what the plugins saw."""
    torch.manual_seed(0)
    target = tiny_model("llama", seed=0, num_layers=6)
    with torch.no_grad():  # sharpen the random model so its distributions are not near-uniform
        target.get_output_embeddings().weight.mul_(30.0)
    drafter_model = SlimVerifier(target, RoutingMask.from_skipped(6, [2, 3, 4])).model  # self-drafting
    mask = RoutingMask.from_skipped(6, [3, 4])

    router, counter = EntropyRouter(threshold), TierCounter(every=4 if verbose else 0)
    manager = make_plugin_manager([router, counter], load_entrypoints=False)
    sampling = SamplingConfig()
    # adaptive=False: the tier on every cycle, so that the router plugin decides every cycle it can
    context = viasd_adapt.context(target, mask=mask, settings=TierSettings(mode="lossy", gamma=4, adaptive=False),
                                  plugin_manager=manager)
    verifier = TieredVerifier.of(context, context.verify_step("engine"), sampling)
    output = speculative_generate(ModelDrafter(drafter_model, sampling), verifier, [5, 17, 33, 2, 9], max_new_tokens)
    metrics = output.metrics
    if verbose:
        print(f"generated {len(output.tokens)} tokens: {output.tokens}")
        print(
            f"tiers seen by the observer: {dict(counter.counts)}; metrics: draft={metrics.draft_tokens} "
            f"slim={metrics.slim_tokens} full={metrics.full_tokens} full passes={metrics.full_passes}"
        )
    return {"output": output, "counts": dict(counter.counts), "events": counter.events}


if __name__ == "__main__":
    torch.set_num_threads(1)
    run_example()
