"""Resume an epoch on another number of ranks: the rest of the saved plan, dealt anew. numpy only.

NOTE [ resume on another number of ranks ]
    Preempted jobs come back on fewer or more cards. Every rank plans the same *global* updates and
    takes its share of them (NOTE [ equal steps without dropping or repeating ] in
    :mod:`dynbatch.plan.sharding`), so the updates do not belong to a rank count: a state saved on
    ``N`` ranks records the rest of its epoch, update by update, as global batches
    (:func:`rest_of`), and a sampler on ``M`` ranks deals each remaining update out to its own ranks
    (:func:`deal_rest`). Every remaining sample then runs once, in the same updates (the same
    samples average into each optimizer step), only cut into ``M`` shares instead of ``N``. A batch
    over this sampler's budget (``max_cost``, ``max_batch_size``: one card's memory) is halved until
    it fits, and an update whose batches do not divide among ``M`` ranks has its heaviest batch
    split, as the sharding does; neither changes which samples make an update. This holds when the
    global update is kept (``batch_size`` times ranks the same, i.e. the same ``update_size``);
    otherwise the updates of the rest of the epoch would not be the saved run's, and
    :func:`check_global_update` says which ``batch_size`` keeps it. A plan without updates (no
    ``update_size``) makes each step of ``N`` batches an update, which ``M`` ranks cannot keep: it
    is refused by name. Later epochs are planned by the new sampler, as a fresh run on ``M`` ranks
    would plan them. Save at the end of an update to resume on other ranks: the rest of an update
    cut by the save would become an update of its own, and a
    :class:`~dynbatch.GradientAccumulator`'s open window (its ``state_dict`` mid-update, held by the
    saved ranks) would not average with it as one update, so a rest saved inside an update (its
    ``update_end`` past the state's position) is refused by name on other ranks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError
from .costs import charge
from .lengths import sample_tokens
from .options import PlanOptions
from .packs import pack_and_deal
from .packs.attention import padding_free
from .planning import padded_lengths
from .plans import Plan
from .sharding import TOLERANCE, ShardedPlan, shard_checked

__all__ = ["check_global_update", "deal_rest", "rest_of"]


def rest_of(sharded: ShardedPlan, position: int, epoch: int = 0) -> dict[str, list[int]]:
    """The global batches of ``sharded`` after ``position`` steps, update by update, JSON-safe.

    ``updates`` counts the batches of each remaining update (the rest of a cut
    update is an update of its own); batches that only repeat samples to even
    out the ranks are left out (a new deal makes its own).
    The digest also covers ``epoch`` and ``position``, where the state says the
    rest starts: an edited one is refused, as on the same ranks.

    >>> from dynbatch.plan.epochs import plan_epoch
    >>> opts = PlanOptions(max_cost=8, cost="linear", max_batch_size=2, update_size=4, order="none")
    >>> rest = rest_of(plan_epoch([1, 1, 2, 2, 3, 3, 4, 4], opts, 0, 2), 1)
    >>> rest["updates"], sorted(rest["indices"])
    ([2], [4, 5, 6, 7])
    """
    replicas = sharded.num_replicas
    steps = sharded.num_steps
    ends = sharded.window_ends
    if ends is None:
        ends = np.arange(1, steps + 1, dtype=np.int64)
    plan = sharded.plan
    step_of = np.arange(steps * replicas, dtype=np.int64) // replicas
    keep = (step_of >= position) & ~sharded.is_padding
    update_of = np.searchsorted(ends, step_of, side="right")
    counts = np.bincount(update_of[keep], minlength=ends.size)
    sizes = plan.sizes[keep]
    indices = plan.indices[np.repeat(keep, plan.sizes)]
    updates = counts[counts > 0]
    # the last update ended before position (0: none yet), the next one ends after it
    inside = position not in (0, *ends.tolist())
    after = int(ends[np.searchsorted(ends, position, side="right")]) if inside else position
    return {
        "sizes": sizes.tolist(),
        "indices": indices.tolist(),
        "updates": updates.tolist(),
        "update_end": after,
        "digest": _digest(sizes, indices, updates, (epoch, position, after)),
    }


def _digest(
    sizes: NDArray[Any], indices: NDArray[Any], updates: NDArray[Any], where: tuple[int, ...]
) -> str:
    """A hash of a rest and of ``(epoch, position)`` where it starts: a torn or edited one that
    still adds up is caught by it."""
    h = hashlib.blake2b(digest_size=16)
    for part in (sizes, indices, updates, where):
        h.update(np.asarray(part, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()


def check_rest(
    rest: Any, samples: int, where: tuple[int, int] = (0, 0)
) -> tuple[NDArray[np.int64], NDArray[np.int64], list[int], int]:
    """A saved :func:`rest_of`, checked: every index in range and once, the counts adding up,
    saved at ``where`` (the state's epoch and position)."""
    keys = {"sizes", "indices", "updates", "update_end", "digest"}
    if not isinstance(rest, Mapping) or keys - set(rest):
        raise InputTypeError(
            "state['rest'] must be the dict of 'sizes', 'indices', 'updates', 'update_end' and "
            f"'digest' that state_dict() saved, got {type(rest).__name__}"
        )
    try:
        sizes = np.asarray(rest["sizes"], dtype=np.int64).reshape(-1)
        indices = np.asarray(rest["indices"], dtype=np.int64).reshape(-1)
        updates = [int(u) for u in rest["updates"]]
        after = int(rest["update_end"])
    except (TypeError, ValueError) as err:
        raise InputTypeError(f"state['rest'] holds values that are not integers: {err}") from None
    bad = (
        (sizes < 1).any()
        or int(sizes.sum()) != indices.size
        or sum(updates) != sizes.size
        or min(updates, default=1) < 1
        or ((indices < 0) | (indices >= samples)).any()
        or np.unique(indices).size != indices.size
        or rest["digest"]
        != _digest(sizes, indices, np.asarray(updates, dtype=np.int64), (*where, after))
    )
    if bad:
        raise InputError(
            f"state['rest'] is not the rest of an epoch of these {samples} samples (sizes, "
            "indices and updates do not add up, an index is out of range or repeated, or the "
            "digest of them and of the state's epoch and position differs): the state was "
            "changed or torn"
        )
    return sizes, indices, updates, after


def check_global_update(
    saved: Mapping[str, Any], saved_replicas: int, options: PlanOptions, num_replicas: int
) -> None:
    """Refuse a rest whose updates this sampler's would not be
    (NOTE [ resume on another ... number of ranks ]), saying which ``batch_size`` keeps the saved
    update."""
    size, unit = saved.get("update_size"), saved.get("update_unit", "samples")
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 < size < math.inf
    ):
        raise (InputError if isinstance(size, (int, float)) else InputTypeError)(
            "state['options']['update_size'] must be a number > 0 or None, got "
            f"state['options']['update_size']={size!r} ({type(size).__name__})"
        )
    if unit not in ("samples", "tokens"):
        raise (InputError if isinstance(unit, str) else InputTypeError)(
            "state['options']['update_unit'] must be 'samples' or 'tokens', got "
            f"state['options']['update_unit']={unit!r}"
        )
    if size is None:
        raise InputError(
            f"this sampler state was saved with num_replicas={saved_replicas}, this sampler has "
            f"num_replicas={num_replicas}; no update_size: each step of {saved_replicas} "
            f"batch(es) was one update, which {num_replicas} rank(s) cannot keep. Resume with "
            f"num_replicas={saved_replicas}, "
            "or train with batch_size= (or update_size=) to resume on another number of ranks"
        )
    if size == options.update_size and unit == options.update_unit:
        return
    per_rank = float(size) / num_replicas
    if unit == "samples" and per_rank == int(per_rank):
        valid = f"with num_replicas={num_replicas} use batch_size={int(per_rank)}"
    else:
        valid = f"with num_replicas={num_replicas} use update_size={size:g}"
    raise InputError(
        f"this sampler state was saved with num_replicas={saved_replicas} x "
        f"{float(size) / saved_replicas:g} = {size:g} {unit} per update, this sampler makes "
        f"updates of {options.update_size!r} {options.update_unit} on num_replicas="
        f"{num_replicas}: the rest of the epoch would train other updates. Keep the global "
        f"update: {valid} (update_unit={unit!r})"
    )


def _fit(batch: NDArray[np.int64], plens: NDArray[Any], options: PlanOptions) -> list[Any]:
    """``batch`` halved (alternating lengths) until each part fits ``options``' budget (pairs:
    each side's longest, alternating by tokens)."""
    cap = options.max_batch_size
    n = batch.size
    longest = plens[batch].max(axis=0)[None]
    over = n > 1 and (
        (cap is not None and n > cap)
        or float(np.asarray(charge(options.cost, n, longest))[0]) > options.max_cost
    )
    if not over:
        return [batch]
    ordered = batch[np.argsort(sample_tokens(plens[batch]), kind="stable")]
    return _fit(ordered[0::2], plens, options) + _fit(ordered[1::2], plens, options)


def deal_rest(
    rest: Any,
    lengths: NDArray[np.int64],
    options: PlanOptions,
    num_replicas: int,
    epoch: int,
    position: int = 0,
    saved_replicas: int | None = None,
) -> ShardedPlan:
    """The saved rest of an epoch as a plan for ``num_replicas`` ranks, update by update
    (``position``: where the state says the rest starts, checked by the rest's digest; a
    rest saved on ``saved_replicas`` other than these must start at an update's end)."""
    sizes, indices, updates, after = check_rest(rest, len(lengths), (epoch, position))
    if saved_replicas not in (None, num_replicas) and after != position:
        raise InputError(
            f"this sampler state was saved inside an update (after micro-batch {position}; "
            f"updates end at {after}, not there): the rest of that update would train as an "
            "update of its own on other ranks, and a GradientAccumulator's open window would "
            "not average with it. Resume on the saved number of ranks, or save at an update's "
            "end (where GradientAccumulator.backward returns True)"
        )
    if options.pack_len is not None:
        return _deal_packed(sizes, indices, updates, lengths, options, num_replicas)
    plens = padded_lengths(lengths, options.pad_to_multiple_of)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    parts: list[ShardedPlan] = []
    first = 0
    for count in updates:
        batches: list[Any] = []
        for b in range(first, first + count):
            batches += _fit(indices[offsets[b] : offsets[b + 1]], plens, options)
        first += count
        plan = Plan.from_batches(batches)
        parts.append(
            shard_checked(plan, lengths, num_replicas, epoch, None, TOLERANCE, options, owned=True)
        )
    steps = np.cumsum([p.num_steps for p in parts], dtype=np.int64)
    whole = Plan.from_batches([b for p in parts for b in p.plan])
    padding = np.concatenate([p.is_padding for p in parts]) if parts else np.zeros(0, bool)
    order = np.arange(len(whole), dtype=np.int64)
    return ShardedPlan(whole, order, padding, num_replicas, steps)


def _deal_packed(
    sizes: Any,
    indices: Any,
    updates: Any,
    lengths: NDArray[np.int64],
    options: PlanOptions,
    num_replicas: int,
) -> ShardedPlan:
    """The rest of a packed epoch for ``num_replicas`` ranks: each remaining update's samples
    packed and dealt anew, as a packed epoch's updates are (NOTE [ packed updates ] in
    :mod:`dynbatch.plan.packs.epochs`)."""
    offsets = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    ends = np.cumsum(np.asarray(updates, dtype=np.int64))
    bounds = offsets[np.r_[0, ends]].astype(np.int64)
    rest = Plan(np.asarray(indices, dtype=np.int64), bounds)
    pack_len, by_work = int(options.pack_len or 0), padding_free(options.cost)
    return pack_and_deal(lengths, rest, pack_len, options.max_rows, num_replicas, by_work)
