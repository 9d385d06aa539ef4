"""The search's GP fit says nothing to the user about botorch's internals: equal costs (a pair whose
masks all cost the same) are a result to search on, not a warning to show."""

from __future__ import annotations

import warnings

import torch

from viasd_adapt.search.gp import fit_gp


def _botorch_warnings(run) -> list[str]:
    from botorch.exceptions.warnings import BotorchWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if issubclass(w.category, BotorchWarning)]


def test_equal_costs_fit_without_a_botorch_warning():
    from botorch.models import SingleTaskGP

    x = torch.rand(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(6, 1, dtype=torch.float64)
    assert _botorch_warnings(lambda: fit_gp(x, y, maxiter=5)) == []
    assert _botorch_warnings(lambda: SingleTaskGP(x, y))  # control: botorch itself warns on these outcomes
