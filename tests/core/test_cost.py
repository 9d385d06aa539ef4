"""The KL-style verification cost R, the block cost C and Delta (docs/method.md section 6).

Expected values are computed here straight from the formula with ``math.log`` on tiny
vocabularies, never by calling the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from viasd_adapt.core.cost import block_cost, routed_path_cost, routing_delta, verification_cost


def relu(x: float) -> float:
    return max(0.0, x)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def reference_cost(a: list[float], b: list[float], alpha: float = 0.0, beta: float = 1.0, phi=relu) -> float:
    """R(a || b) by the formula, in plain Python over a few tokens (zero-weight terms dropped)."""
    total = 0.0
    for av, bv in zip(a, b):
        if bv > 0:
            total += bv * phi(math.log(1 - alpha) + math.log(bv) - math.log(av))
        if av > 0:
            total += av * phi(math.log(av) - math.log(bv) - math.log(beta))
    return total


def logp(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log()


def cost(a: list[float], b: list[float], **kw) -> float:
    return float(verification_cost(logp(a), logp(b), **kw))


# ----------------------------------------------------------------------------- hand-computed values


def test_two_token_value_by_hand():
    # a = (0.5, 0.5) verifies b = (0.8, 0.2), alpha = 0.5, beta = 1.
    # z1 = log(0.5) + log(b/a) = log(0.8), log(0.2) -> both negative -> 0.
    # z2 = log(a/b) = log(0.625) < 0, log(2.5) > 0 -> 0.5 * log(2.5).
    assert cost([0.5, 0.5], [0.8, 0.2], alpha=0.5) == pytest.approx(0.5 * math.log(2.5), rel=1e-6)


def test_three_token_value_by_hand_alpha_zero():
    a, b = [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]
    # z1 > 0 only at v0: 0.6 * log(0.6/0.2); z2 > 0 only at v2: 0.5 * log(0.5/0.1).
    expected = 0.6 * math.log(3.0) + 0.5 * math.log(5.0)
    assert cost(a, b) == pytest.approx(expected, rel=1e-6)
    assert cost(a, b) == pytest.approx(reference_cost(a, b), rel=1e-6)  # the code works in float32


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("beta", [1.0, 1.5, 4.0])
def test_matches_reference_for_alpha_and_beta(alpha, beta):
    a, b = [0.1, 0.25, 0.65], [0.5, 0.4, 0.1]
    assert cost(a, b, alpha=alpha, beta=beta) == pytest.approx(reference_cost(a, b, alpha, beta), rel=1e-6, abs=1e-12)


def test_softplus_option_by_hand():
    a, b = [0.4, 0.6], [0.7, 0.3]
    expected = reference_cost(a, b, alpha=0.2, beta=1.5, phi=softplus)
    by_hand = (
        0.7 * softplus(math.log(0.8) + math.log(0.7 / 0.4))
        + 0.3 * softplus(math.log(0.8) + math.log(0.3 / 0.6))
        + 0.4 * softplus(math.log(0.4 / 0.7) - math.log(1.5))
        + 0.6 * softplus(math.log(0.6 / 0.3) - math.log(1.5))
    )
    assert expected == pytest.approx(by_hand, rel=1e-12)
    assert cost(a, b, alpha=0.2, beta=1.5, phi="softplus") == pytest.approx(by_hand, rel=1e-6)
    # softplus never vanishes: identical distributions cost 2 log 2 at alpha=0, beta=1.
    assert cost(b, b, phi="softplus") == pytest.approx(2 * math.log(2.0), rel=1e-6)


def test_callable_phi_and_unknown_phi():
    a, b = [0.4, 0.6], [0.7, 0.3]
    squared = cost(a, b, phi=lambda z: torch.relu(z) ** 2)
    assert squared == pytest.approx(0.7 * math.log(0.7 / 0.4) ** 2 + 0.6 * math.log(0.6 / 0.3) ** 2, rel=1e-6)
    with pytest.raises(ValueError, match="phi"):
        verification_cost(logp(a), logp(b), phi="tanh")


# ----------------------------------------------------------------------------- qualitative properties


@pytest.mark.parametrize("probs", [[1.0, 0.0], [0.5, 0.5], [0.2, 0.3, 0.5], [0.97, 0.01, 0.01, 0.01]])
def test_identical_distributions_cost_nothing(probs):
    assert cost(probs, probs, alpha=0.0, beta=1.0) == 0.0


def test_cost_grows_as_distributions_move_apart():
    b = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    c = torch.tensor([0.05, 0.15, 0.8], dtype=torch.float64)
    values = []
    for t in torch.linspace(0, 1, 11):
        a = (1 - t) * b + t * c
        values.append(float(verification_cost(a.log(), b.log())))
    assert values[0] == 0.0
    assert all(later > earlier for earlier, later in zip(values, values[1:])), values


def test_larger_alpha_forgives_shortfall_and_larger_beta_forgives_borrowing():
    a, b = [0.1, 0.3, 0.6], [0.6, 0.3, 0.1]
    by_alpha = [cost(a, b, alpha=x) for x in (0.0, 0.3, 0.6, 0.9)]
    assert all(y < x for x, y in zip(by_alpha, by_alpha[1:])), by_alpha
    by_beta = [cost(a, b, beta=x) for x in (1.0, 2.0, 4.0, 8.0)]
    assert all(y < x for x, y in zip(by_beta, by_beta[1:])), by_beta
    # alpha only touches the z1 (shortfall) sum, beta only the z2 (borrowing) sum.
    assert cost(a, b, alpha=0.9) == pytest.approx(reference_cost(a, b, alpha=0.9), rel=1e-6)
    # beta = 6 exceeds every a/b ratio here (max 6), so the borrowing sum vanishes entirely.
    assert cost(a, b, beta=6.0) == pytest.approx(0.6 * math.log(6.0) + 0.3 * 0.0, rel=1e-6)


def test_asymmetric_in_general():
    a, b = [0.1, 0.9], [0.6, 0.4]
    assert cost(a, b, alpha=0.3) != pytest.approx(cost(b, a, alpha=0.3))


def test_invalid_parameters_raise():
    with pytest.raises(ValueError, match="alpha"):
        verification_cost(logp([0.5, 0.5]), logp([0.5, 0.5]), alpha=1.0)
    with pytest.raises(ValueError, match="beta"):
        verification_cost(logp([0.5, 0.5]), logp([0.5, 0.5]), beta=0.5)
    with pytest.raises(ValueError, match="shape"):
        verification_cost(logp([0.5, 0.5]), logp([0.2, 0.3, 0.5]))


# ----------------------------------------------------------------------------- masked vocabularies


def test_jointly_masked_tokens_are_ignored():
    """Top-k masks (-inf on both sides) give the cost of the unmasked sub-vocabulary, no NaN."""
    inf = float("-inf")
    la = torch.tensor([math.log(0.25), math.log(0.75), inf, inf])
    lb = torch.tensor([math.log(0.6), math.log(0.4), inf, inf])
    value = float(verification_cost(la, lb, alpha=0.2))
    assert math.isfinite(value)
    assert value == pytest.approx(reference_cost([0.25, 0.75], [0.6, 0.4], alpha=0.2), rel=1e-5)


def test_mass_on_a_token_the_other_side_masked_is_finite_and_dominant():
    inf = float("-inf")
    la = torch.tensor([0.0, inf, inf])  # verifier: all mass on token 0
    lb = torch.tensor([math.log(0.5), math.log(0.5), inf])  # proposer puts half on token 1
    value = float(verification_cost(la, lb))
    assert math.isfinite(value)
    assert value > cost([0.999, 0.001], [0.5, 0.5])
    # Both directions, several positions: the block sum must stay finite too.
    rows_a = torch.stack([la, lb, la, lb])
    rows_b = torch.stack([lb, la, lb, la])
    block = block_cost(rows_a, rows_b)
    assert torch.isfinite(block).all(), block
    per_position = verification_cost(rows_a, rows_b)
    assert torch.isfinite(per_position).all() and (per_position > 0).all()


# ----------------------------------------------------------------------------- block cost and Delta


def test_block_cost_sums_positions_and_respects_weights():
    a = torch.tensor([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]], dtype=torch.float64)
    b = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.3, 0.7]], dtype=torch.float64)
    rows = [reference_cost(a[i].tolist(), b[i].tolist(), alpha=0.3) for i in range(3)]
    assert float(block_cost(a.log(), b.log(), alpha=0.3)) == pytest.approx(sum(rows), rel=1e-6)
    weights = torch.tensor([1.0, 1.0, 0.0])
    assert float(block_cost(a.log(), b.log(), alpha=0.3, position_weights=weights)) == pytest.approx(
        rows[0] + rows[1], rel=1e-6
    )
    batched = block_cost(torch.stack([a, a.flip(0)]).log(), torch.stack([b, b.flip(0)]).log(), alpha=0.3)
    assert batched.shape == (2,)
    assert batched[0].item() == pytest.approx(batched[1].item(), rel=1e-9)


def _delta(p, u, q, **kw) -> float:
    return float(routing_delta(logp(q).unsqueeze(0), logp(u).unsqueeze(0), logp(p).unsqueeze(0), **kw))


def test_delta_positive_when_slim_sits_between_draft_and_target():
    p, u, q = [0.9, 0.1], [0.5, 0.5], [0.1, 0.9]
    # C(q||p) = 0.9 log 9 + 0.9 log 9; C(u||p) = C(q||u) = 0.9 log 1.8 + 0.5 log 5.
    direct = 1.8 * math.log(9.0)
    routed = 2 * (0.9 * math.log(1.8) + 0.5 * math.log(5.0))
    assert _delta(p, u, q) == pytest.approx(direct - routed, rel=1e-6)
    assert _delta(p, u, q) > 0


def test_delta_negative_when_slim_overshoots():
    p, u, q = [0.6, 0.4], [0.99, 0.01], [0.1, 0.9]
    assert _delta(p, u, q) < 0


def test_routed_path_uses_alpha1_then_alpha2():
    p, u, q = [0.7, 0.3], [0.4, 0.6], [0.2, 0.8]
    expected = reference_cost(u, p, alpha=0.5) + reference_cost(q, u, alpha=0.3)
    got = routed_path_cost(logp(q).unsqueeze(0), logp(u).unsqueeze(0), logp(p).unsqueeze(0), alpha1=0.5, alpha2=0.3)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    delta = _delta(p, u, q, alpha=0.1, alpha_slim=(0.5, 0.3))
    assert delta == pytest.approx(reference_cost(q, p, alpha=0.1) - expected, rel=1e-6)


def test_top1_margin_cost_is_the_log_gap_to_the_candidates_own_top_token():
    from viasd_adapt.core.cost import top1_margin_cost

    reference = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]))
    candidate = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.1, 0.3], [0.4, 0.5, 0.1]]))
    margins = top1_margin_cost(reference, candidate)
    # position 0: both rank token 0 first -> 0; position 1: reference's token 1 has 0.1 against the
    # candidate's top 0.6; position 2: reference's token 2 has 0.1 against 0.5
    expected = [0.0, math.log(0.6) - math.log(0.1), math.log(0.5) - math.log(0.1)]
    assert margins.tolist() == pytest.approx(expected, abs=1e-6)
    assert (top1_margin_cost(reference, reference) == 0).all()
    assert top1_margin_cost(reference[None], candidate[None]).shape == (1, 3)  # batch dimensions are kept


@pytest.mark.parametrize("chunk", [1, 7, 3 * 11 + 5])
def test_chunked_positions_give_every_cost_the_reference_value(monkeypatch, chunk):
    """The cost works on a few positions at a time (a 151,936-token vocabulary over a calibration
    set held gigabytes of temporaries at once); every position keeps its own value, checked
    against the formula, across leading dimensions and with masked tokens."""
    import viasd_adapt.core.cost as cost_module

    monkeypatch.setattr(cost_module, "COST_CHUNK_ELEMENTS", chunk)  # chunk // 11 rows at a time, at least one
    g = torch.Generator().manual_seed(3)
    a = torch.softmax(torch.randn(2, 5, 11, generator=g) * 2, -1)
    b = torch.softmax(torch.randn(2, 5, 11, generator=g) * 2, -1)
    for probs in (a, b):  # tokens both sides filtered out (top-k)
        probs[0, 1, :4] = 0.0
        probs[0, 1] /= probs[0, 1].sum()
    rows, inner = [], cost_module._position_cost
    monkeypatch.setattr(cost_module, "_position_cost", lambda la, *rest: rows.append(la.shape[0]) or inner(la, *rest))
    got = verification_cost(a.log(), b.log(), alpha=0.2, beta=1.5)
    assert got.shape == (2, 5) and sum(rows) == 10 and max(rows) == max(1, chunk // 11)
    expected = [[reference_cost(a[i, t].tolist(), b[i, t].tolist(), 0.2, 1.5) for t in range(5)] for i in range(2)]
    assert got.tolist() == [pytest.approx(row, rel=1e-5) for row in expected]
    monkeypatch.setattr(cost_module, "COST_CHUNK_ELEMENTS", 1 << 23)
    assert torch.equal(verification_cost(a.log(), b.log(), alpha=0.2, beta=1.5), got)  # bit for bit the same
