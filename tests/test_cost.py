from __future__ import annotations

import numpy as np
import pytest

from dynbatch import LinearCost, MixedCost, QuadraticCost, resolve_cost


def test_named_costs() -> None:
    assert resolve_cost("quadratic") == QuadraticCost()
    assert resolve_cost("linear") == LinearCost()
    assert resolve_cost("mixed:2,0.5") == MixedCost(2.0, 0.5)
    assert float(MixedCost(2, 0.5)(3, 10)) == 3 * (2 * 10 + 0.5 * 100)


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        ("mixed:1", "needs two numbers"),
        ("mixed:a,b", "needs two numbers"),
        ("square", "cost='square'"),
    ],
)
def test_bad_cost_names(cost: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_cost(cost)


@pytest.mark.parametrize(("a", "b"), [(-1, 1), (float("nan"), 1), (0, 0), (True, 1)])
def test_bad_mixed_weights(a: float, b: float) -> None:
    with pytest.raises(ValueError, match="MixedCost"):
        MixedCost(a, b)


def test_vectorised_user_cost_is_used_as_is_and_scalar_one_is_lifted() -> None:
    def vec(n, L):
        return n * L

    assert resolve_cost(vec) is vec
    lifted = resolve_cost(lambda n, L: n * max(L, 4))
    assert lifted(np.array([1, 2]), np.array([2, 8])).tolist() == [4.0, 16.0]
