"""One BoTorch proposal over fixed-cardinality binary masks.

* Surrogate: the search's ``SingleTaskGP`` (:func:`viasd_adapt.search.gp.fit_gp`), fitted to
  log(cost) (see ``gp_target``).
* Acquisition: ``qLogNoisyExpectedImprovement`` with ``X_baseline`` = every evaluated mask. Our
  costs are deterministic, but the surface is rugged at the scale a GP sees it; the noisy variant
  lets the GP treat that roughness as noise instead of chasing it.
* Optimiser: BoTorch's discrete local search flips single bits and so can never move under
  ``|z| = k``; instead we score a hand-built pool of masks of the search space (random masks,
  one-move and two-move neighbours of the best few masks by posterior mean; a move is a flip or a
  swap that stays in the space) and then hill-climb over one-move neighbours from the best pool
  members. Evaluated masks are excluded exactly, so none is ever proposed twice.
"""

from __future__ import annotations

import warnings

import torch

from viasd_adapt.search.candidates import Bits, MaskSpace, neighbours, random_neighbours, random_unseen_in, unique_unseen
from viasd_adapt.search.config import BOConfig
from viasd_adapt.search.gp import fit_gp


def gp_target(costs: torch.Tensor) -> torch.Tensor:
    """What the GP models: log(cost) when every cost is positive, else the cost itself.

    Routed-path costs span orders of magnitude (on the demo pair, masks that skip layer 0 cost ~8x
    more than the rest). On the raw scale the GP spends its whole signal explaining that one
    cliff and sees the differences between good masks as noise; the log keeps the ranking and
    makes those differences visible.
    """
    if bool((costs > 0).all()):
        return costs.log()
    return costs


def _score(acqf, masks: list[Bits], chunk: int) -> torch.Tensor:
    """The acquisition value of every mask in ``masks`` (q = 1), in chunks of ``chunk``.

    Not ``botorch.optim.optimize_acqf_discrete``: with q = 1 it returns only the best choice and
    its value, and with q > 1 it picks by sequential conditioning on pending points (other
    values). The proposal needs every value: the best ``hill_starts`` pool members start the
    hill-climb, and the values are kept so that a mask scored once is compared, never re-scored,
    across climbs."""
    values = []
    for start in range(0, len(masks), chunk):
        x = torch.tensor(masks[start : start + chunk], dtype=torch.float64).unsqueeze(-2)
        values.append(acqf(x).detach())
    return torch.cat(values)


@torch.no_grad()
def _posterior_mean(model, masks: list[Bits]) -> torch.Tensor:
    x = torch.tensor(masks, dtype=torch.float64)
    return model.posterior(x).mean.squeeze(-1)


def propose_bo(
    evaluated: list[Bits],
    costs: list[float],
    space: MaskSpace,
    generator: torch.Generator,
    seed: int,
    bo: BOConfig = BOConfig(),
) -> Bits | None:
    """The unseen mask with the highest qLogNEI, or None when no unseen mask is left.

    BoTorch maximises, so the GP is fitted to the negated costs. ``seed`` fixes the global torch
    RNG for the fit and the QMC sampler, which together with ``generator`` (pool draws) makes the
    proposal reproducible. ``bo``: the proposal's internals (pool sizes, hill-climb, samples).
    """
    # the fit and the QMC sampler draw from the global RNG: seed it, scoped, so callers' streams
    # are left as they were
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _propose(evaluated, costs, space, generator, seed, bo)


def _propose(evaluated, costs, space: MaskSpace, generator, seed, bo: BOConfig) -> Bits | None:
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.sampling.normal import SobolQMCNormalSampler

    seen = set(evaluated)
    train_x = torch.tensor(evaluated, dtype=torch.float64)
    train_y = -gp_target(torch.tensor(costs, dtype=torch.float64)).unsqueeze(-1)
    model = fit_gp(train_x, train_y, bo.fit_maxiter)
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([bo.mc_samples]), seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acqf = qLogNoisyExpectedImprovement(model, X_baseline=train_x, sampler=sampler, prune_baseline=True)

    # pool: neighbours of the best few masks by posterior mean, plus random k-subsets
    means = _posterior_mean(model, evaluated)
    top = [evaluated[i] for i in torch.argsort(means, descending=True)[: bo.top_by_mean].tolist()]
    pool: list[Bits] = []
    for bits in top:
        pool.extend(neighbours(bits, space))
        pool.extend(random_neighbours(bits, space, 2, bo.two_swaps_per_top, generator))
    taken = set(seen)
    for _ in range(bo.pool_random):
        bits = random_unseen_in(space, taken, generator, tries=20)
        if bits is None:
            break
        taken.add(bits)
        pool.append(bits)
    pool = unique_unseen(pool, seen)
    if not pool:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = _score(acqf, pool, bo.chunk)
        scored = dict(zip(pool, values.tolist()))
        # short hill-climb over one-swaps from the best pool members
        starts = [pool[i] for i in torch.argsort(values, descending=True)[: bo.hill_starts].tolist()]
        for current in starts:
            for _ in range(bo.hill_rounds):
                around = unique_unseen(neighbours(current, space), seen)
                fresh = [b for b in around if b not in scored]
                if not around:
                    break
                if fresh:
                    scored.update(zip(fresh, _score(acqf, fresh, bo.chunk).tolist()))
                best_neighbour = max(around, key=scored.__getitem__)
                if scored[best_neighbour] <= scored[current]:
                    break
                current = best_neighbour
    # ties broken by first-scored order, which is deterministic
    return max(scored, key=scored.__getitem__)
