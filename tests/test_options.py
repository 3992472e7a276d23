"""``PlanOptions``: what the fields mean together (bad input is in test_bad_input_options)."""

from __future__ import annotations

import numpy as np
import pytest

from dynbatch import LinearCost, MixedCost, PairCost, PlanOptions


@pytest.mark.parametrize(
    ("cost", "max_cost", "pack_len", "multiple", "rows", "unpadded"),
    [
        ("linear", 4000, 500, 64, 7, 8),  # rows of 500 are 512 wide: 4000 // 512
        ("quadratic", 3 * 128**2, 100, 64, 3, 4),  # rows of 100 are 128 wide: 3 x 128²
        ("linear", 4096, 512, 64, 8, 8),  # already a multiple: nothing to round
    ],
)
def test_pad_to_multiple_of_goes_with_pack_len_and_max_rows_counts_the_widest_row(
    cost: str, max_cost: int, pack_len: int, multiple: int, rows: int, unpadded: int
) -> None:
    """A packed micro-batch's rows are padded to its fullest row, rounded up to
    ``pad_to_multiple_of``: the widest a row can be is ``pack_len`` so rounded, and
    ``max_rows`` counts rows that wide."""
    common = {"max_cost": max_cost, "cost": cost, "pack_len": pack_len, "update_size": 8}
    opts = PlanOptions(**common, pad_to_multiple_of=multiple)
    assert opts.pad_to_multiple_of == multiple, "accepted with pack_len"
    assert opts.max_rows == rows, "rows of pack_len rounded up to the multiple"
    assert PlanOptions(**common).max_rows == unpadded, "without the multiple: rows of pack_len"
    width = -(-pack_len // multiple) * multiple
    assert float(opts.cost(opts.max_rows, width)) <= max_cost < float(opts.cost(rows + 1, width))


@pytest.mark.parametrize(
    ("saved", "here"),
    [
        (PairCost(), "quadratic"),
        ("linear", PairCost(1, 0, 0)),
        (MixedCost(0, 1), "quadratic"),
        (MixedCost(1, 0), LinearCost()),
        (PairCost(2, 3, 3), MixedCost(2, 3)),
    ],
)
def test_costs_that_plan_alike_fingerprint_alike(saved: object, here: object) -> None:
    """docs/loop.md: a named cost prices pairs in its two-length form, so ``PairCost()`` is
    ``"quadratic"`` on pairs; a resume compares the fingerprints, and refused the one for the
    other (\"the plan differs\")."""
    assert PlanOptions(max_cost=9, cost=saved).fingerprint() == (
        PlanOptions(max_cost=9, cost=here).fingerprint()
    )


@pytest.mark.parametrize(
    ("one", "other"),
    [(PairCost(0, 1, 2), "quadratic"), (MixedCost(1, 1), "linear"), (MixedCost(2, 0), "linear")],
)
def test_costs_that_plan_otherwise_fingerprint_otherwise(one: object, other: object) -> None:
    assert (
        PlanOptions(max_cost=9, cost=one).fingerprint()["cost"]
        != (PlanOptions(max_cost=9, cost=other).fingerprint()["cost"])
    )


@pytest.mark.parametrize(
    ("saved", "here", "max_cost"),
    [(PairCost(), "quadratic", 20000), ("linear", PairCost(1, 0, 0), 1000)],
)
@pytest.mark.parametrize("recipe", [False, True], ids=["max_cost", "batch_size"])
def test_a_sampler_of_pairs_resumes_under_the_same_cost_spelt_otherwise(
    saved: object, here: object, max_cost: int, recipe: bool
) -> None:
    pytest.importorskip("paddle")
    from dynbatch import DynamicBatchSampler

    rng = np.random.default_rng(0)
    pairs = np.stack([rng.integers(5, 60, 300), rng.integers(5, 90, 300)], axis=1)
    budget = {"batch_size": 16} if recipe else {"max_cost": max_cost}

    def sampler(cost: object) -> DynamicBatchSampler:
        return DynamicBatchSampler(lengths=pairs, cost=cost, seed=3, **budget)

    first = sampler(saved)
    first.set_epoch(0)  # every pass the same epoch
    whole = [list(b) for b in first]
    assert len(whole) > 8, "batches to resume among"
    taken = iter(first)
    for _ in range(4):
        next(taken)
    resumed = sampler(here)
    resumed.load_state_dict(first.state_dict())
    assert [list(b) for b in resumed] == whole[4:], "exactly the rest of the epoch"
