"""The KL-style log-margin verification cost of VIA-SD (paper Eq. 11; docs/method.md section 6).

For a verifier ``a`` checking a proposer ``b`` at one position, with log-probabilities ``lb`` and
``la`` over the vocabulary::

    z1(v) = log(1 - alpha) + lb(v) - la(v)    # how far b's token misses the (1 - alpha) share of a's support
    z2(v) = la(v) - lb(v) - log(beta)         # a must borrow mass beyond beta * b (residual)
    R(a || b) = sum_v b(v) phi(z1(v)) + sum_v a(v) phi(z2(v))

The block cost sums R over positions, and a routed path p -> u -> q beats the direct path when
``Delta(u) = C(q||p) - [C(u||p) + C(q||u)] > 0``.

Everything here is pure tensor code over log-probabilities, batched over leading dimensions, so it
can be unit-tested without a model and reused by the mask search.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

import torch
import torch.nn.functional as F

Phi = Literal["relu", "softplus"]

_PHI: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "softplus": F.softplus}


def _resolve_phi(phi: Phi | Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    if callable(phi):
        return phi
    try:
        return _PHI[phi]
    except KeyError:
        raise ValueError(f"phi must be one of {sorted(_PHI)} or a callable, got {phi!r}") from None


# Largest margin (in nats) a single token can contribute. Mass on a token the other side masked out
# (-inf log-prob) has an infinite margin; capping it keeps per-position costs, and their sums over a
# block or a calibration window, finite and still ordered (a capped violation dwarfs any real one:
# nonzero float32 probabilities are at most ~104 nats apart).
MARGIN_CAP = 1e4
#: Vocabulary entries :func:`verification_cost` works on at once (rows of positions): each of its
#: half-dozen full-vocabulary temporaries stays near 32 MB. Unchunked, a mask search's cost over 768
#: positions of a 151,936-token vocabulary held about 3 GB of temporaries. Every position's cost is
#: computed alone either way, so the chunking does not change a value.
COST_CHUNK_ELEMENTS = 1 << 23


def _weighted_violation(weights_log: torch.Tensor, margin: torch.Tensor, phi) -> torch.Tensor:
    """sum_v exp(weights_log(v)) * phi(margin(v)), with 0 * anything = 0.

    Top-k / top-p filtering leaves -inf log-probs. Where the weight is zero the term must vanish even
    if the margin is +inf or NaN (inf - inf), so the weight decides before the margin is looked at.
    """
    weights = weights_log.exp()
    violation = phi(torch.nan_to_num(margin, nan=0.0, posinf=MARGIN_CAP).clamp(max=MARGIN_CAP))
    return torch.where(weights > 0, weights * violation, torch.zeros_like(weights)).sum(dim=-1)


def verification_cost(
    logp_verifier: torch.Tensor,
    logp_proposer: torch.Tensor,
    alpha: float = 0.0,
    beta: float = 1.0,
    phi: Phi | Callable[[torch.Tensor], torch.Tensor] = "relu",
) -> torch.Tensor:
    """Per-position cost R(a || b) for verifier ``a`` checking proposer ``b``.

    Args:
        logp_verifier: log-probabilities of the verifier ``a``, shape ``(..., V)``.
        logp_proposer: log-probabilities of the proposer ``b``, same shape.
        alpha: acceptance tolerance in [0, 1).
        beta: residual tolerance, >= 1.
        phi: ``"relu"`` (hard margin, the default), ``"softplus"`` or a callable.

    Returns:
        A tensor of shape ``(...)``: one cost per position.
    """
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    if beta < 1.0:
        raise ValueError(f"beta must be >= 1, got {beta}")
    if logp_verifier.shape != logp_proposer.shape:
        raise ValueError(
            f"verifier and proposer log-probs differ in shape: {tuple(logp_verifier.shape)} vs "
            f"{tuple(logp_proposer.shape)} (different vocabularies?)"
        )
    phi_fn = _resolve_phi(phi)
    vocab = logp_verifier.shape[-1]
    rows_a, rows_b = logp_verifier.reshape(-1, vocab), logp_proposer.reshape(-1, vocab)
    out = torch.empty(rows_a.shape[0], dtype=torch.float32, device=rows_a.device)
    step = max(1, COST_CHUNK_ELEMENTS // max(1, vocab))
    for start in range(0, rows_a.shape[0], step):
        rows = slice(start, start + step)
        out[rows] = _position_cost(rows_a[rows].float(), rows_b[rows].float(), alpha, beta, phi_fn)
    return out.reshape(logp_verifier.shape[:-1])


def _position_cost(la: torch.Tensor, lb: torch.Tensor, alpha: float, beta: float, phi) -> torch.Tensor:
    """R(a || b) of each row of ``(rows, V)`` log-probs (module docstring)."""
    log_ratio = lb - la  # may be +-inf or NaN where either side is masked
    z1 = math.log1p(-alpha) + log_ratio
    z2 = -log_ratio - math.log(beta)
    return _weighted_violation(lb, z1, phi) + _weighted_violation(la, z2, phi)


def block_cost(
    logp_verifier: torch.Tensor,
    logp_proposer: torch.Tensor,
    alpha: float = 0.0,
    beta: float = 1.0,
    phi: Phi | Callable[[torch.Tensor], torch.Tensor] = "relu",
    position_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """C(a || b): R summed over the position axis (the second-to-last dimension).

    ``position_weights`` (shape ``(..., T)``, 0/1) excludes padding positions from the sum.
    """
    per_position = verification_cost(logp_verifier, logp_proposer, alpha, beta, phi)
    if position_weights is not None:
        per_position = per_position * position_weights.to(per_position.dtype)
    return per_position.sum(dim=-1)


def routed_path_cost(
    logp_full: torch.Tensor,
    logp_slim: torch.Tensor,
    logp_draft: torch.Tensor,
    alpha1: float = 0.5,
    alpha2: float = 0.3,
    beta: float = 1.0,
    phi: Phi | Callable[[torch.Tensor], torch.Tensor] = "relu",
    position_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """C(u || p) + C(q || u): the cost of the routed path p -> u -> q (what DIMR minimises).

    Gate 1 (u checking p) uses ``alpha1`` and gate 2 (q checking u) uses ``alpha2``, matching the
    tolerances the tiers apply at inference.
    """
    first = block_cost(logp_slim, logp_draft, alpha1, beta, phi, position_weights)
    second = block_cost(logp_full, logp_slim, alpha2, beta, phi, position_weights)
    return first + second


def routing_delta(
    logp_full: torch.Tensor,
    logp_slim: torch.Tensor,
    logp_draft: torch.Tensor,
    alpha: float = 0.0,
    beta: float = 1.0,
    phi: Phi | Callable[[torch.Tensor], torch.Tensor] = "relu",
    alpha_slim: tuple[float, float] | None = None,
    position_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Delta(u) = C(q||p) - [C(u||p) + C(q||u)]: positive when inserting u helps.

    ``alpha`` is the direct path's tolerance; ``alpha_slim`` = (alpha1, alpha2) the routed path's
    (default: ``alpha`` on both segments, the paper's Eq. 10 as written).
    """
    a1, a2 = alpha_slim if alpha_slim is not None else (alpha, alpha)
    direct = block_cost(logp_full, logp_draft, alpha, beta, phi, position_weights)
    routed = routed_path_cost(logp_full, logp_slim, logp_draft, a1, a2, beta, phi, position_weights)
    return direct - routed


def top1_margin_cost(logp_reference: torch.Tensor, logp_candidate: torch.Tensor) -> torch.Tensor:
    """Per position, how many nats the candidate's log-probability of the reference's most likely
    token falls below the candidate's own most likely token: ``max_v lc(v) - lc(argmax lr)``.

    Zero exactly where the candidate ranks the reference's token first, and growing with how far
    down it ranks it: the log-margin hinge of greedy top-1 agreement. Why a mask search may want it
    instead of C(q || u): in greedy decoding the slim verifier commits its own argmax, so what
    fidelity loses is the positions where that argmax is not q's; C(q || u) weighs the whole
    distribution, and on SmolLM2-135M its best masks agree with q less than random masks do
    (docs/results.md, "The objective: margin against routed"). Shape ``(..., vocab) -> (...)``.
    """
    reference_token = logp_reference.argmax(-1, keepdim=True)
    return logp_candidate.max(-1).values - logp_candidate.gather(-1, reference_token).squeeze(-1)
