from __future__ import annotations

import numpy as np
import pytest

from dynbatch import LinearCost, MemoryCost, MixedCost, QuadraticCost, resolve_cost
from dynbatch.plan.costs import PairCost, charge, cost_spec, pair_form, takes_pairs


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


# -- costs of (source, target) pairs (NOTE [ costs of pairs ]) ------------------------------------
def test_the_pair_cost_is_each_sides_rule_plus_the_cross_term() -> None:
    n, ls, lt = np.array([2, 3]), np.array([10, 4]), np.array([5, 7])
    assert PairCost()(n, ls, lt).tolist() == (n * (ls**2 + lt**2 + ls * lt)).tolist()
    mixed = PairCost(a=2.0, b=0.5, cross=0.25)(n, ls, lt)
    expected = n * (2.0 * (ls + lt) + 0.5 * (ls**2 + lt**2) + 0.25 * ls * lt)
    assert mixed.tolist() == expected.tolist()
    assert resolve_cost(PairCost()) == PairCost() and cost_spec(PairCost()) == repr(PairCost())


def test_named_costs_price_pairs_as_their_two_length_form() -> None:
    assert pair_form(resolve_cost("quadratic")) == PairCost()
    assert pair_form(resolve_cost("linear")) == PairCost(a=1.0, b=0.0, cross=0.0)
    assert pair_form(resolve_cost("mixed:2,0.5")) == PairCost(a=2.0, b=0.5, cross=0.5)
    longest = np.array([[10, 5], [4, 7]])
    assert charge("linear", np.array([2, 3]), longest).tolist() == [30.0, 33.0]


def test_a_callable_of_three_arguments_prices_pairs() -> None:
    def vectorised(n, Ls, Lt):  # type: ignore[no-untyped-def]
        return n * (Ls + Lt)

    fn = resolve_cost(vectorised)
    assert takes_pairs(fn) and fn(np.array([2]), np.array([3]), np.array([4])).tolist() == [14]
    scalar = resolve_cost(lambda n, Ls, Lt: n * max(Ls, Lt))  # max() takes scalars only
    assert scalar(np.array([2, 1]), np.array([3, 9]), np.array([4, 1])).tolist() == [8.0, 9.0]
    assert not takes_pairs(resolve_cost(lambda n, L, scale=2: n * L * scale)), "two required"


def test_a_cost_of_one_length_is_refused_for_pairs_and_one_of_pairs_for_one_length() -> None:
    with pytest.raises(ValueError, match=r"cost=MemoryCost.* takes one length, \(n, L\)"):
        pair_form(MemoryCost(c=1.0, a=1.0, b=0.0))
    with pytest.raises(ValueError, match=r"balance=.* takes two lengths, \(n, Ls, Lt\)"):
        charge(PairCost(), 2, np.array([4]), "balance")
