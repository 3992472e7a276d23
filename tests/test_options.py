"""``PlanOptions``: what the fields mean together (bad input is in test_bad_input_options)."""

from __future__ import annotations

import pytest

from dynbatch import PlanOptions


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
