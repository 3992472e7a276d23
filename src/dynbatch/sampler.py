"""Paddle batch samplers over :func:`~dynbatch.plan_batches`: the adapters that import paddle.

NOTE [ prefetch and resume ]
    ``paddle.io.DataLoader`` calls ``iter(batch_sampler)`` before training
    starts and keeps ``prefetch_factor * num_workers`` batches in flight, so
    the number of batches the sampler has *yielded* runs ahead of the number
    training has *finished*. ``state_dict()`` alone records what was yielded,
    which would skip the prefetched batches on resume. Pass
    ``state_dict(consumed_batches=k)``, where ``k`` counts the batches of the
    current epoch your loop finished (including any it had before a resume),
    and the restarted run yields exactly the batches after those ``k``:
    none lost, none repeated. Resuming costs one planning call, never a replay
    of the data.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from numpy.typing import NDArray

from ._checks import check_int, check_lengths
from ._optional import require
from .cost import CostLike, cost_name, resolve_cost
from .lengths import compute_lengths
from .planning import plan_batches
from .sharding import ShardedPlan, shard_plan

paddle = require("paddle", "dynbatch's samplers")
from paddle.io import BatchSampler, DistributedBatchSampler  # noqa: E402

__all__ = ["DistributedDynamicBatchSampler", "DynamicBatchSampler"]

_STATE_VERSION = 1


def _resolve_lengths(
    dataset: Any,
    lengths: Any,
    length_fn: Callable[[Any], int] | None,
    ref_index: Any,
    cache_path: str | os.PathLike[str] | None,
) -> NDArray[Any]:
    if lengths is not None:
        if length_fn is not None or ref_index is not None:
            raise ValueError(
                "give lengths or a way to measure them (length_fn / ref_index), not both; got "
                f"lengths and length_fn={length_fn!r}, ref_index={ref_index!r}"
            )
        lens = check_lengths(lengths)
        if dataset is not None and len(dataset) != lens.size:
            raise ValueError(
                f"lengths has {lens.size} entries but the dataset has {len(dataset)} samples; "
                "they must match one to one"
            )
        return lens
    if dataset is None:
        raise ValueError("give lengths=..., or a dataset with length_fn=... or ref_index=...")
    if length_fn is None and ref_index is None:
        raise ValueError(
            "a dataset alone does not say how long its samples are: pass lengths=array, "
            "length_fn=callable(sample) -> int, or ref_index=field whose size is the length"
        )
    return compute_lengths(dataset, length_fn=length_fn, ref_index=ref_index, cache_path=cache_path)


class _Planned:
    """What both samplers share: options, the per-epoch plan, epochs, resume state."""

    num_replicas: int
    rank: int

    def _setup(
        self,
        dataset: Any,
        lengths: Any,
        length_fn: Callable[[Any], int] | None,
        ref_index: Any,
        cache_path: str | os.PathLike[str] | None,
        options: dict[str, Any],
        drop_last: bool,
    ) -> None:
        self.dataset = dataset
        self.lengths = _resolve_lengths(dataset, lengths, length_fn, ref_index, cache_path)
        self.cost = resolve_cost(options.pop("cost"))
        self.options = options
        self.max_cost = options["max_cost"]
        self.seed = options["seed"]
        self.order = options["order"]
        self.drop_last = drop_last
        self.batch_size = options["max_batch_size"]  # read by some paddle code paths
        self.shuffle = self.order in ("bucket", "shuffle")
        self.epoch = 0
        self._start = 0  # first batch the next iteration yields (set by load_state_dict)
        self._yielded = 0  # batches of the current epoch handed out so far
        self._cached: tuple[int, ShardedPlan] | None = None
        self._sharded(0)  # validates every option now, not at the first batch

    def _sharded(self, epoch: int) -> ShardedPlan:
        if self._cached is None or self._cached[0] != epoch:
            plan = plan_batches(
                self.lengths, cost=self.cost, epoch=epoch, drop_last=self.drop_last, **self.options
            )
            sharded = shard_plan(
                plan,
                self.lengths,
                self.num_replicas,
                cost=self.cost,
                pad_to_multiple_of=self.options["pad_to_multiple_of"],
                seed=self.seed,
                epoch=epoch,
                keep_order=self.order in ("none", "ascending", "descending"),
                drop_last=self.drop_last,
            )
            self._cached = (epoch, sharded)
        return self._cached[1]

    def batches(self, epoch: int | None = None) -> list[NDArray[Any]]:
        """This rank's planned batches for ``epoch`` (default: the current one), in order."""
        return self._sharded(self.epoch if epoch is None else check_int("epoch", epoch)).for_rank(
            self.rank
        )

    def padding_mask(self, epoch: int | None = None) -> NDArray[Any]:
        """True for this rank's batches that repeat samples only to even out step counts."""
        sharded = self._sharded(self.epoch if epoch is None else check_int("epoch", epoch))
        return sharded.is_padding[self.rank :: self.num_replicas]

    def set_epoch(self, epoch: int) -> None:
        """Plan the given epoch next. Keeps a resume position loaded for that same epoch."""
        epoch = check_int("epoch", epoch)
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch
        self._yielded = self._start

    def __iter__(self) -> Iterator[list[int]]:
        plan = self.batches()
        start, self._start = self._start, 0
        self._yielded = start
        for batch in plan[start:]:
            self._yielded += 1
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self.batches()) - self._start

    def fingerprint(self) -> str:
        """Hash of the lengths and every option that shapes the plan."""
        h = hashlib.blake2b(self.lengths.tobytes(), digest_size=16)
        opts = {
            **self.options,
            "cost": cost_name(self.cost),
            "drop_last": self.drop_last,
            "num_replicas": self.num_replicas,
        }
        h.update(json.dumps(opts, sort_keys=True, default=str).encode())
        return h.hexdigest()

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """Where this epoch stands; see NOTE [ prefetch and resume ] for ``consumed_batches``."""
        position = (
            self._yielded
            if consumed_batches is None
            else check_int("consumed_batches", consumed_batches)
        )
        total = len(self.batches())
        if position > total:
            raise ValueError(
                f"consumed_batches must be in [0, {total}] (batches in epoch {self.epoch}), "
                f"got consumed_batches={consumed_batches}"
            )
        return {
            "version": _STATE_VERSION,
            "epoch": self.epoch,
            "position": position,
            "seed": self.seed,
            "fingerprint": self.fingerprint(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields epoch ``state["epoch"]`` after ``position`` batches."""
        missing = {"version", "epoch", "position", "fingerprint"} - set(state)
        if missing:
            raise ValueError(f"not a dynbatch sampler state: missing keys {sorted(missing)}")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"sampler state version {state['version']!r} is not {_STATE_VERSION}")
        if state["fingerprint"] != self.fingerprint():
            raise ValueError(
                "this sampler state was saved for different lengths or options (seed, max_cost, "
                "cost, order, num_replicas, ...): resuming from it would feed the wrong samples. "
                "Build the sampler with the options of the saved run."
            )
        epoch = check_int("state['epoch']", state["epoch"])
        self.epoch = epoch
        total = len(self.batches())
        position = check_int("state['position']", state["position"])
        if position > total:
            raise ValueError(
                f"state['position']={position} is past the {total} batches of epoch {epoch}"
            )
        self._start = self._yielded = position


_SAMPLER_DOC = """
    Args:
        dataset: the dataset; needed with ``length_fn`` or ``ref_index``, and
            checked against ``lengths`` for size when both are given.
        lengths: per-sample lengths; or measure them once with
            ``length_fn(sample) -> int`` or the size of field ``ref_index``.
        cache_path: store measured lengths here (``.npz``) keyed by a dataset
            fingerprint; a later run with the same dataset loads them.
        max_cost, cost, order, seed, max_batch_size, batch_size_multiple,
        pad_to_multiple_of, oversize, drop_last, bucket_width: as in
            :func:`~dynbatch.plan_batches`.
"""


class DynamicBatchSampler(_Planned, BatchSampler):
    """A ``paddle.io.BatchSampler`` whose batches fit a cost budget instead of a fixed size.

    ``len(sampler)`` is exact before the first iteration; call
    ``set_epoch(e)`` each epoch for fresh random batches. ``state_dict`` /
    ``load_state_dict`` resume mid-epoch (NOTE [ prefetch and resume ]).
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        ref_index: Any = None,
        max_cost: float,
        cost: CostLike = "quadratic",
        order: str = "bucket",
        seed: int = 0,
        max_batch_size: int | None = None,
        batch_size_multiple: int = 1,
        pad_to_multiple_of: int = 1,
        oversize: str = "error",
        drop_last: bool = False,
        bucket_width: float = 0.05,
        cache_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.num_replicas, self.rank = 1, 0
        self._setup(
            dataset,
            lengths,
            length_fn,
            ref_index,
            cache_path,
            dict(
                max_cost=max_cost,
                cost=cost,
                order=order,
                seed=seed,
                max_batch_size=max_batch_size,
                batch_size_multiple=batch_size_multiple,
                pad_to_multiple_of=pad_to_multiple_of,
                oversize=oversize,
                bucket_width=bucket_width,
            ),
            drop_last,
        )

    __init__.__doc__ = _SAMPLER_DOC


class DistributedDynamicBatchSampler(_Planned, DistributedBatchSampler):
    """:class:`DynamicBatchSampler` for data-parallel training: each rank gets its share.

    Every rank yields the same number of batches and, step by step, batches of
    similar cost, with nothing dropped or repeated (NOTE [ equal steps without
    dropping or repeating ] in :mod:`dynbatch.sharding`). A subclass of
    ``paddle.io.DistributedBatchSampler``, so ``paddlenlp.trainer.Trainer``
    calls its ``set_epoch``.

    Args:
        num_replicas, rank: default to paddle's parallel environment.
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        ref_index: Any = None,
        max_cost: float,
        cost: CostLike = "quadratic",
        order: str = "bucket",
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        max_batch_size: int | None = None,
        batch_size_multiple: int = 1,
        pad_to_multiple_of: int = 1,
        oversize: str = "error",
        drop_last: bool = False,
        bucket_width: float = 0.05,
        cache_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if num_replicas is None or rank is None:
            env = paddle.distributed.ParallelEnv()
            num_replicas = env.world_size if num_replicas is None else num_replicas
            rank = env.rank if rank is None else rank
        self.num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        self.rank = check_int("rank", rank)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank must be in [0, {self.num_replicas - 1}], got rank={rank}")
        self.nranks, self.local_rank = self.num_replicas, self.rank  # paddle's names
        self._setup(
            dataset,
            lengths,
            length_fn,
            ref_index,
            cache_path,
            dict(
                max_cost=max_cost,
                cost=cost,
                order=order,
                seed=seed,
                max_batch_size=max_batch_size,
                batch_size_multiple=batch_size_multiple,
                pad_to_multiple_of=pad_to_multiple_of,
                oversize=oversize,
                bucket_width=bucket_width,
            ),
            drop_last,
        )
