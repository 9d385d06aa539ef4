"""The Gaussian process both strategies fit to evaluated masks: defined once.

A ``SingleTaskGP`` on the 0/1 keep-bits in float64 with a ``Standardize`` outcome transform; its
RBF kernel on binary inputs is a weighted Hamming kernel. The fit is capped at ``maxiter`` L-BFGS
iterations (uncapped fits grew to seconds per step with no better fit). DIMR's BoTorch proposal
(:mod:`viasd_adapt.search.bo`) fits one per proposal; the guided search
(:mod:`viasd_adapt.search.guided`) fits one every few proposals and rebuilds it on new data with
the fitted kernel in between (:func:`rebuild_gp`).

BoTorch is imported inside the functions: importing the search must not pay for it.
"""

from __future__ import annotations

import warnings

import torch

#: The modules whose fitted state :func:`rebuild_gp` reuses.
GP_STATE = ("covar_module", "likelihood", "mean_module")


def fit_gp(train_x: torch.Tensor, train_y: torch.Tensor, maxiter: int):
    """A ``SingleTaskGP`` on ``(train_x, train_y)``, its hyperparameters fitted by maximum marginal
    likelihood with at most ``maxiter`` L-BFGS iterations."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    with warnings.catch_warnings():
        # botorch's note on unscaled outcomes (the Standardize transform scales them; equal costs,
        # as on a pair whose masks all cost the same, have nothing to scale) and optimisation-warning
        # chatter from capped fits
        warnings.simplefilter("ignore")
        model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1))
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
    return model


def fitted_state(model) -> dict:
    """The fitted kernel, noise and mean of ``model`` (what :func:`rebuild_gp` loads)."""
    return {name: getattr(model, name).state_dict() for name in GP_STATE}


def rebuild_gp(train_x: torch.Tensor, train_y: torch.Tensor, state: dict):
    """A ``SingleTaskGP`` on all data with a previously fitted kernel, noise and mean
    (:func:`fitted_state`): exact, no optimisation."""
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1))
        for name, module_state in state.items():
            getattr(model, name).load_state_dict(module_state)
    return model.eval()


__all__ = ["GP_STATE", "fit_gp", "fitted_state", "rebuild_gp"]
