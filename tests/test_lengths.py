from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynbatch import compute_lengths


def test_ref_index_and_length_fn_agree() -> None:
    data = [(np.arange(n), n % 2) for n in (3, 1, 7)]
    assert compute_lengths(data, ref_index=0).tolist() == [3, 1, 7]
    assert compute_lengths(data, length_fn=lambda s: len(s[0]) + 2).tolist() == [5, 3, 9]
    assert compute_lengths([{"ids": [1, 2]}], ref_index="ids").tolist() == [2]


def test_a_field_with_no_size_is_named() -> None:
    with pytest.raises(TypeError, match=r"ref_index=1 has no size: got int 0"):
        compute_lengths([([1, 2], 0)], ref_index=1)
    with pytest.raises(TypeError, match="ref_index=5 does not select a field"):
        compute_lengths([([1, 2], 0)], ref_index=5)


def test_exactly_one_way_to_measure() -> None:
    with pytest.raises(ValueError, match="exactly one of length_fn or ref_index"):
        compute_lengths([[1]], length_fn=len, ref_index=0)
    with pytest.raises(ValueError, match="exactly one"):
        compute_lengths([[1]])


def test_cache_is_used_and_refreshed_when_the_dataset_changes(tmp_path: Path) -> None:
    calls = []

    def measure(sample: list[int]) -> int:
        calls.append(1)
        return len(sample)

    data = [[1] * n for n in range(1, 50)]
    cache = tmp_path / "lens.npz"
    first = compute_lengths(data, length_fn=measure, cache_path=cache)
    n_calls = len(calls)
    second = compute_lengths(data, length_fn=measure, cache_path=cache)
    assert np.array_equal(first, second), "the same lengths"
    assert len(calls) - n_calls <= 5, "second run read the cache (measuring 5 probes at most)"
    other = compute_lengths(data[:-1], length_fn=measure, cache_path=cache)
    assert other.size == 48 and len(calls) > n_calls, "a different dataset is measured again"


def test_two_lambdas_with_one_name_do_not_share_a_cache(tmp_path: Path) -> None:
    data = [([1] * n, 0) for n in range(1, 40)]
    cache = tmp_path / "lens.npz"
    first = compute_lengths(data, length_fn=lambda s: len(s[0]), cache_path=cache)
    second = compute_lengths(data, length_fn=lambda s: len(s[0]) + 2, cache_path=cache)
    assert (second == first + 2).all(), "the second function's lengths, not the cached ones"


@pytest.mark.parametrize("content", [b"", b"not a zip", None])
def test_an_unreadable_cache_is_measured_again_with_a_warning(tmp_path: Path, content) -> None:
    cache = tmp_path / "lens.npz"
    if content is None:
        np.savez(cache, something=np.arange(3))  # a valid file without our keys
    else:
        cache.write_bytes(content)
    data = [[1] * n for n in range(1, 10)]
    with pytest.warns(UserWarning, match="not a readable lengths cache"):
        lens = compute_lengths(data, length_fn=len, cache_path=cache)
    assert lens.tolist() == list(range(1, 10))
    assert compute_lengths(data, length_fn=len, cache_path=cache).tolist() == lens.tolist()


def test_a_directory_cache_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        compute_lengths([[1]], length_fn=len, cache_path=tmp_path)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("7", TypeError, "must be a whole number, got '7'"),
        (True, TypeError, "got True"),
        (None, TypeError, "got None"),
        (2.5, ValueError, "got 2.5"),
    ],
)
def test_length_fn_must_return_whole_numbers(value: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        compute_lengths([[1], [2]], length_fn=lambda s: value)


@pytest.mark.parametrize("value", [0, -1, -3.0])
def test_a_length_fn_result_below_1_names_the_sample_once(value: float) -> None:
    lengths = {0: 5, 1: value}
    with pytest.raises(ValueError) as caught:
        compute_lengths([0, 1], length_fn=lambda s: lengths[s])
    message = str(caught.value)
    assert "of sample 1 must be a whole number >= 1" in message, message
    assert message.count("length_fn=") == 1, message


def test_a_captured_value_is_part_of_the_cache_key(tmp_path: Path) -> None:
    data = [([1] * n, 0) for n in range(1, 40)]
    cache = tmp_path / "lens.npz"

    def capped(cap: int):  # type: ignore[no-untyped-def]
        return lambda s: min(len(s[0]), cap)

    assert compute_lengths(data, length_fn=capped(30), cache_path=cache).max() == 30
    assert compute_lengths(data, length_fn=capped(20), cache_path=cache).max() == 20


def test_cache_path_must_be_a_path() -> None:
    with pytest.raises(TypeError, match="cache_path must be a file path, got cache_path=123"):
        compute_lengths([[1]], length_fn=len, cache_path=123)  # type: ignore[arg-type]


def test_a_torn_cache_is_measured_again_and_a_failed_write_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOTE [ atomic writes ]: a cache cut off mid-file is named and measured again, never
    half read; a write that cannot reach the disk leaves the cache written before."""
    import os

    cache = tmp_path / "lens.npz"
    data = [[1] * n for n in range(1, 10)]
    compute_lengths(data, length_fn=len, cache_path=cache)
    whole = cache.read_bytes()
    cache.write_bytes(whole[: len(whole) // 2])
    with pytest.warns(UserWarning, match="lens.npz' is not a readable lengths cache"):
        assert compute_lengths(data, length_fn=len, cache_path=cache).tolist() == list(range(1, 10))
    with np.load(cache) as again:
        assert again["lengths"].tolist() == list(range(1, 10)), "replaced by a whole cache"
    whole = cache.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        compute_lengths(data[:5], length_fn=len, cache_path=cache)  # another fingerprint
    assert cache.read_bytes() == whole, "the cache written before, whole"
    assert [p.name for p in tmp_path.iterdir()] == ["lens.npz"], "no partial file left"


def test_a_length_fn_of_pairs_gives_source_and_target_lengths(tmp_path: Path) -> None:
    data = [("ab", "xyz"), ("abcd", "x"), ("a", "xy")]
    calls = []

    def both(sample: tuple[str, str]) -> tuple[int, int]:
        calls.append(1)
        return len(sample[0]), len(sample[1])

    cache = tmp_path / "pairs.npz"
    lengths = compute_lengths(data, length_fn=both, cache_path=cache)
    assert lengths.tolist() == [[2, 3], [4, 1], [1, 2]] and lengths.dtype == np.int64
    measured = len(calls)
    again = compute_lengths(data, length_fn=both, cache_path=cache)
    assert again.tolist() == lengths.tolist() and len(calls) - measured <= 5, "from the cache"
    as_arrays = compute_lengths(data, length_fn=lambda s: np.array([len(s[0]), len(s[1])]))
    assert as_arrays.tolist() == lengths.tolist(), "a pair as an array of two"


@pytest.mark.parametrize("where", [1, 17, 38], ids=["between-probes", "middle", "last-but-one"])
def test_an_edit_of_one_sample_anywhere_is_measured_again(tmp_path: Path, where: int) -> None:
    """NOTE [ what decides the lengths ]: the cache was keyed on five samples, so a changed
    target of one pair between them was served its stale lengths, without a word."""
    data = [{"source": [1] * (n % 7 + 1), "target": [2] * (n % 5 + 1)} for n in range(40)]

    def both(s: dict) -> tuple[int, int]:
        return len(s["source"]), len(s["target"])

    cache = tmp_path / "pairs.npz"
    compute_lengths(data, length_fn=both, cache_path=cache)
    data[where] = {**data[where], "target": [2] * 30}  # one pair's target, in place
    again = compute_lengths(data, length_fn=both, cache_path=cache)
    assert again[where].tolist() == [len(data[where]["source"]), 30], "measured again"
    assert again.tolist() == [list(both(s)) for s in data]


def test_an_edit_past_a_long_samples_first_4096_bytes_is_measured_again(tmp_path: Path) -> None:
    data = [np.arange(3000) for _ in range(9)]  # repr() of a long array elides its middle
    cache = tmp_path / "lens.npz"
    measure = lambda s: int((s >= 0).sum())  # noqa: E731
    assert compute_lengths(data, length_fn=measure, cache_path=cache).tolist() == [3000] * 9
    data[5] = data[5].copy()
    data[5][1500] = -1
    assert compute_lengths(data, length_fn=measure, cache_path=cache)[5] == 2999


def test_a_sample_that_cannot_be_fingerprinted_is_measured_with_a_warning(tmp_path: Path) -> None:
    data = [(lambda: None, [1] * n) for n in range(1, 6)]  # a lambda does not pickle
    cache = tmp_path / "lens.npz"
    with pytest.warns(UserWarning, match=r"sample 0 cannot be pickled.*measured, not cached"):
        lengths = compute_lengths(data, ref_index=1, cache_path=cache)
    assert lengths.tolist() == [1, 2, 3, 4, 5] and not cache.exists()
