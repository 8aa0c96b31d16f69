import itertools
import math

import pytest
import torch

from stacklm.semiring import LOG, MAX_PLUS, REAL, logsumexp


def test_logsumexp_matches_torch_on_finite_values():
    x = torch.randn(4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(logsumexp(x, dim=1), torch.logsumexp(x, dim=1))
    torch.testing.assert_close(logsumexp(x, dim=(0, 2), keepdim=True), torch.logsumexp(x, dim=(0, 2), keepdim=True))


def test_logsumexp_of_all_minus_infinity_is_minus_infinity_with_zero_gradient():
    x = torch.tensor([[-math.inf, -math.inf], [0.0, -math.inf]], dtype=torch.float64, requires_grad=True)
    y = logsumexp(x, dim=1)
    assert y[0].item() == -math.inf and y[1].item() == 0.0
    (y[1] * 3.0 + torch.where(torch.isfinite(y), y, 0.0).sum()).backward()
    assert not torch.isnan(x.grad).any()
    torch.testing.assert_close(x.grad, torch.tensor([[0.0, 0.0], [4.0, 0.0]], dtype=torch.float64))


def test_torch_logsumexp_would_give_nan_gradient():
    """The reason ``logsumexp`` exists: the library function does not survive all −∞."""
    x = torch.full((3,), -math.inf, dtype=torch.float64, requires_grad=True)
    torch.logsumexp(x, dim=0).backward()
    assert torch.isnan(x.grad).all()


@pytest.mark.parametrize("semiring", [REAL, LOG, MAX_PLUS])
def test_semiring_axioms_on_random_values(semiring):
    g = torch.Generator().manual_seed(1)
    a, b, c = (semiring.from_real(torch.rand(7, dtype=torch.float64, generator=g)) for _ in range(3))
    zero = semiring.zeros(7, dtype=torch.float64)
    one = semiring.ones(7, dtype=torch.float64)
    torch.testing.assert_close(semiring.plus(a, zero), a)
    torch.testing.assert_close(semiring.times(a, one), a)
    torch.testing.assert_close(semiring.times(a, zero), zero)
    torch.testing.assert_close(semiring.times(a, semiring.plus(b, c)), semiring.plus(semiring.times(a, b), semiring.times(a, c)))


def test_log_sum_equals_real_sum_and_max_plus_is_max():
    weights = torch.rand(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(LOG.to_real(LOG.sum(LOG.from_real(weights), dim=1)), REAL.sum(weights, dim=1))
    torch.testing.assert_close(MAX_PLUS.to_real(MAX_PLUS.sum(MAX_PLUS.from_real(weights), dim=1)), weights.amax(dim=1))


def test_counting_all_paths_of_a_chain():
    """All-ones weights in REAL count paths: a chain of 4 choices of 3 has 3**4 paths."""
    total = REAL.ones(1, dtype=torch.float64)
    for _ in range(4):
        total = REAL.times(total, REAL.sum(REAL.ones(3, dtype=torch.float64), dim=0))
    assert total.item() == 3**4
    assert sum(1 for _ in itertools.product(range(3), repeat=4)) == 81
