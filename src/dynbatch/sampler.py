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

NOTE [ resume fingerprint ]
    A saved state must only load into a sampler that plans the same batches,
    else the resumed run silently trains on the wrong samples. The state keeps
    a digest of the lengths, every option (normalised, so ``1048576`` and
    ``1048576.0``, or a seed given as ``np.int64``, are the same option) and a
    digest of the saved epoch's plan itself. The options say *what* differs in
    the error message; the plan digest is the final word, and covers what
    cannot be described faithfully, such as a cost given as a lambda (two
    lambdas share a name whatever their bodies).
"""

from __future__ import annotations

import hashlib
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import (
    InputError,
    InputTypeError,
    check_dataset,
    check_epochs,
    check_int,
    check_lengths,
)
from ._optional import require
from .contract import Pass
from .lengths import compute_lengths
from .options import UNDESCRIBED, PlanOptions, resolve_options
from .planning import Plan
from .recipes import like_fixed
from .sharding import ShardedPlan, equal_batch_count, plan_epoch
from .windows import optimizer_steps

paddle = require("paddle", "dynbatch's samplers")
from paddle.io import BatchSampler, DistributedBatchSampler  # noqa: E402

__all__ = ["DistributedDynamicBatchSampler", "DynamicBatchSampler"]

_STATE_VERSION = 2
_STATE_KEYS = ("version", "epoch", "position", "num_replicas", "lengths", "options", "plan")


def _check_map_style(dataset: Any) -> None:
    """Refuse an iterable dataset by name: the plan needs every length before the epoch."""
    hint = (
        "an iterable dataset (read in order, without len() or [i], such as a "
        "paddle.io.IterableDataset or a generator) is not supported yet: the planner needs every "
        "length before the epoch starts, and the DataLoader fetches samples by index. Pass a "
        "map-style dataset (len() and [i]: a list, or a paddle.io.Dataset), e.g. list(dataset), "
        "with lengths=... or length_fn=..."
    )
    if isinstance(dataset, paddle.io.IterableDataset):
        raise InputTypeError(
            f"dataset is a paddle.io.IterableDataset ({type(dataset).__name__}): {hint}"
        )
    if not hasattr(dataset, "__len__"):
        raise InputTypeError(f"dataset has no len() (got a {type(dataset).__name__}): {hint}")
    check_dataset("dataset", dataset)


def _resolve_lengths(
    dataset: Any,
    lengths: Any,
    length_fn: Callable[[Any], int] | None,
    ref_index: Any,
    cache_path: str | os.PathLike[str] | None,
) -> NDArray[np.int64]:
    if dataset is not None:
        _check_map_style(dataset)
    if lengths is not None:
        if length_fn is not None or ref_index is not None:
            raise InputError(
                "give lengths or a way to measure them (length_fn / ref_index), not both; got "
                f"lengths and length_fn={length_fn!r}, ref_index={ref_index!r}"
            )
        lens = check_lengths(lengths)
        if dataset is not None and len(dataset) != lens.size:
            raise InputError(
                f"lengths has {lens.size} entries but the dataset has {len(dataset)} samples; "
                "they must match one to one"
            )
        return lens
    if dataset is None:
        raise InputError("give lengths=..., or a dataset with length_fn=... or ref_index=...")
    if length_fn is None and ref_index is None:
        raise InputError(
            "a dataset alone does not say how long its samples are: pass lengths=array, "
            "length_fn=callable(sample) -> int, or ref_index=field whose size is the length"
        )
    return compute_lengths(dataset, length_fn=length_fn, ref_index=ref_index, cache_path=cache_path)


def _lengths_digest(lengths: NDArray[np.int64]) -> str:
    return hashlib.blake2b(lengths.tobytes(), digest_size=16).hexdigest()


class _Planned:
    """What both samplers share: options, the per-epoch plan, passes, resume state.

    Implements :class:`~dynbatch.contract.PlanSource`.
    """

    num_replicas: int
    rank: int
    batch_size: Any  # paddle's is an int; ours is max_batch_size, which may be None

    def _setup(
        self,
        dataset: Any,
        lengths: Any,
        length_fn: Callable[[Any], int] | None,
        ref_index: Any,
        cache_path: str | os.PathLike[str] | None,
        options: PlanOptions | None,
        batch_size: int | None,
        shortcuts: dict[str, Any],
    ) -> None:
        self.dataset = dataset
        self.lengths = _resolve_lengths(dataset, lengths, length_fn, ref_index, cache_path)
        if batch_size is not None:
            if options is not None:
                raise InputError(
                    f"{type(self).__name__}: give batch_size (the fixed batch to train like) or "
                    f"options=PlanOptions(...), not both; got batch_size={batch_size!r}"
                )
            if "num_replicas" in shortcuts:
                raise InputTypeError(
                    f"{type(self).__name__} got num_replicas={shortcuts['num_replicas']!r}: it "
                    "plans for the ranks it serves; use DistributedDynamicBatchSampler(..., "
                    "num_replicas=..., rank=...) for several"
                )
            options = like_fixed(
                self.lengths, batch_size, num_replicas=self.num_replicas, **shortcuts
            )
            shortcuts = {}
        self.options = opts = resolve_options(options, shortcuts, type(self).__name__)
        # the options under the names paddle code reads (never assigned again)
        self.max_cost, self.cost, self.seed, self.order = (
            opts.max_cost,
            opts.cost,
            opts.seed,
            opts.order,
        )
        self.drop_last, self.shuffle = opts.drop_last, opts.random_order
        self.batch_size = opts.max_batch_size
        self.epoch = 0
        self._auto_epoch = True  # until set_epoch: NOTE [ a new epoch each pass ]
        self._advance = False  # the next pass plans the next epoch (auto mode only)
        self._resume = 0  # the batch the next iteration of self.epoch starts at
        self._yielded = 0  # batches of the current pass handed out so far (absolute position)
        self._pass = Pass(epoch=0, start=0, serial=0)
        self._plans: dict[int, ShardedPlan] = {}
        self._count: int | None = None  # the batch count of every epoch, with equal_epochs
        self.epoch_plan(0)  # plans now: bad options fail here, not at the first batch

    # -- the contract (dynbatch.contract.PlanSource) -----------------------------------------
    def epoch_plan(self, epoch: int | None = None) -> ShardedPlan:
        """Every rank's batches of ``epoch`` (default: the current one), step-major."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch)
        cached = self._plans.get(epoch)
        if cached is None:
            if self.options.equal_epochs and self._count is None:
                self._count = equal_batch_count(self.lengths, self.options, self.num_replicas)
            cached = plan_epoch(
                self.lengths, self.options, epoch, self.num_replicas, num_batches=self._count
            )
            if len(self._plans) >= 2:  # the current epoch and one more (a look-ahead)
                self._plans.pop(next(iter(self._plans)))
            self._plans[epoch] = cached
        return cached

    def batches(self, epoch: int | None = None) -> Plan:
        """This rank's planned batches for ``epoch`` (default: the current one), in order."""
        return self.epoch_plan(epoch).for_rank(self.rank)

    def padding_mask(self, epoch: int | None = None) -> NDArray[np.bool_]:
        """True for this rank's batches that repeat samples only to even out step counts."""
        return self.epoch_plan(epoch).padding_for_rank(self.rank)

    def current_pass(self) -> Pass:
        """The iteration under way (the last one begun); before any, the one the next will be."""
        if self._pass.serial == 0:
            epoch, start = self._upcoming()
            return Pass(epoch=epoch, start=start, serial=0)
        return self._pass

    def len_for_epochs(self, epochs: Iterable[int]) -> int:
        """Batches this rank yields over ``epochs`` (e.g. ``range(E)``): exact, for schedules."""
        return sum(self._plan_for(e).num_steps for e in check_epochs(epochs))

    def steps_for_epochs(self, epochs: Iterable[int]) -> int:
        """Optimizer updates over ``epochs`` (e.g. ``range(E)``), for the LR schedule.

        The plan's updates (``options.update_size``), or one per batch. Needs
        no optimizer, so the schedule can be made before it.
        """
        return sum(optimizer_steps(self._plan_for(e), self.lengths) for e in check_epochs(epochs))

    def _plan_for(self, epoch: int) -> ShardedPlan:
        """``epoch``'s plan, cached or not (sizing a run must not evict the epochs in use)."""
        sharded = self._plans.get(epoch)
        if sharded is None:
            sharded = plan_epoch(
                self.lengths, self.options, epoch, self.num_replicas, num_batches=self._count
            )
        return sharded

    # -- paddle's sampler interface --------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Plan the given epoch next. Keeps a resume position loaded for that same epoch.

        NOTE [ a new epoch each pass ]
            ``paddle.io.BatchSampler(shuffle=True)`` gives a new order every
            pass without being asked, so a loop that never calls ``set_epoch``
            must not see the same batches every epoch. Until ``set_epoch`` is
            first called, each new pass over the sampler plans the next epoch
            (the first pass, or the one after ``load_state_dict``, plans the
            epoch it holds). Once called, ``set_epoch`` alone decides.
        """
        epoch = check_int("epoch", epoch)
        if epoch != self.epoch or self._advance:
            self._resume = 0
        self.epoch = epoch
        self._auto_epoch = self._advance = False

    def _upcoming(self) -> tuple[int, int]:
        """The epoch the next pass plans and the batch it starts at."""
        if self._advance:
            return self.epoch + 1, 0
        return self.epoch, self._resume

    def __iter__(self) -> Iterator[list[int]]:
        self.epoch, self._resume = self._upcoming()
        self._advance = self._auto_epoch
        epoch = self.epoch
        indices, offsets = self.batches(epoch).lists()
        start, self._resume = self._resume, 0
        self._pass = Pass(epoch=epoch, start=start, serial=self._pass.serial + 1)
        self._yielded = start
        for k in range(start, len(offsets) - 1):
            self._yielded = k + 1
            yield indices[offsets[k] : offsets[k + 1]]

    def __len__(self) -> int:
        total = self._plan_for(self.epoch).num_steps
        if self._advance and self._pass.serial and self._yielded < total:
            return total - self._pass.start  # a pass under way: its own length
        epoch, start = self._upcoming()
        return self._plan_for(epoch).num_steps - start

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """Where this epoch stands; see NOTE [ prefetch and resume ] for ``consumed_batches``."""
        epoch = self.epoch
        total = self.epoch_plan().num_steps
        if consumed_batches is None:
            position = self._yielded if self._pass.epoch == self.epoch else self._resume
            if self._advance and position >= total:  # auto mode, the pass ran out
                epoch, position = self._upcoming()
        else:
            position = check_int("consumed_batches", consumed_batches)
            if position > total:
                raise InputError(
                    f"consumed_batches must be in [0, {total}] (batches in epoch {self.epoch}), "
                    f"got consumed_batches={consumed_batches}"
                )
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "num_replicas": self.num_replicas,
            "lengths": _lengths_digest(self.lengths),
            "options": self.options.fingerprint(),
            "plan": self.epoch_plan(epoch).digest(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration yields epoch ``state["epoch"]`` after ``position`` batches.

        Everything is checked before anything is changed (NOTE [ resume fingerprint ]).
        """
        if not isinstance(state, Mapping):
            raise InputTypeError(
                f"state must be the dict that state_dict() returned, got {type(state).__name__}"
            )
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise InputError(f"not a dynbatch sampler state: missing keys {missing}")
        version = state["version"]
        if not _is_int(version):
            raise InputTypeError(
                f"state['version'] must be the integer {_STATE_VERSION}, got "
                f"state['version']={version!r} ({type(version).__name__})"
            )
        if version != _STATE_VERSION:
            raise InputError(
                f"sampler state version {version!r} is not {_STATE_VERSION}: it was "
                "saved by another dynbatch release"
            )
        epoch = check_int("state['epoch']", state["epoch"])
        position = check_int("state['position']", state["position"])
        replicas = state["num_replicas"]
        if not _is_int(replicas) or replicas < 1:
            raise (InputError if _is_int(replicas) else InputTypeError)(
                f"state['num_replicas'] must be an integer >= 1, got "
                f"state['num_replicas']={replicas!r} ({type(replicas).__name__})"
            )
        if replicas != self.num_replicas:
            raise InputError(
                f"this sampler state was saved with num_replicas={int(replicas)}, "
                f"this sampler has num_replicas={self.num_replicas}"
            )
        for key in ("lengths", "plan"):
            if not isinstance(state[key], str):
                raise InputTypeError(
                    f"state['{key}'] must be a str (a digest), got state['{key}']="
                    f"{state[key]!r} ({type(state[key]).__name__})"
                )
        if state["lengths"] != _lengths_digest(self.lengths):
            raise InputError(
                "this sampler state was saved for different lengths (another dataset, or "
                "lengths measured differently): resuming from it would feed the wrong samples"
            )
        saved, here = state["options"], self.options.fingerprint()
        if not isinstance(saved, Mapping):
            raise InputTypeError(f"state['options'] must be a dict, got {saved!r}")
        if set(saved) != set(here):
            raise InputError(
                f"state['options'] must hold every option ({', '.join(sorted(here))}), "
                f"got {saved!r}"
            )
        differ = [
            f"{k}: saved {_typed(saved[k], here[k])}, here {_typed(here[k], saved[k])}"
            for k in here
            if UNDESCRIBED not in (saved[k], here[k])
            and (saved[k] != here[k] or isinstance(saved[k], bool) != isinstance(here[k], bool))
        ]
        if differ:
            raise InputError(
                "this sampler state was saved with other options, so the plan differs: "
                + "; ".join(differ)
                + ". Build the sampler with the options of the saved run."
            )
        sharded = self.epoch_plan(epoch)
        if state["plan"] != sharded.digest():
            raise InputError(
                f"this sampler state was saved for another plan of epoch {epoch} (a custom cost "
                "or balance function, or the planner, changed): resuming from it would feed the "
                "wrong samples. Build the sampler exactly as in the saved run."
            )
        total = sharded.num_steps
        if position > total:
            raise InputError(
                f"state['position']={position} is past the {total} batches of epoch {epoch}"
            )
        self.epoch = epoch
        self._resume = self._yielded = position
        self._advance = False  # the next pass is the loaded epoch


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _typed(value: Any, other: Any) -> str:
    """``repr(value)``, with its type when ``other``'s type is another (``1`` against ``'1'``)."""
    kinds = {type(value), type(other)}
    if len(kinds) == 1 or kinds <= {int, float} or type(None) in kinds:
        return repr(value)
    return f"{value!r} ({type(value).__name__})"


_SAMPLER_DOC = """
    Args:
        dataset: the dataset; needed with ``length_fn`` or ``ref_index``, and
            checked against ``lengths`` for size when both are given.
        lengths: per-sample lengths; or measure them once with
            ``length_fn(sample) -> int`` or the size of field ``ref_index``.
        cache_path: store measured lengths here (``.npz``) keyed by a dataset
            fingerprint; a later run with the same dataset loads them.
        options: a :class:`~dynbatch.PlanOptions`; or give its fields as
            keywords (``max_cost=..., cost=..., order=..., seed=...,
            max_batch_size=..., batch_size_multiple=..., pad_to_multiple_of=...,
            oversize=..., drop_last=..., bucket_width=..., equal_epochs=...,
            balance=..., update_size=..., update_unit=...``), not both.
        batch_size: the fixed batch (per rank) to train like, instead of
            ``options``: :meth:`PlanOptions.like_fixed` plans padding-free
            micro-batches in updates of that many samples, lengths mixed
            (NOTE [ the fixed batch's recipe ]). Other keywords are options
            (``max_cost=`` then is a budget for the micro-batches).
"""


class DynamicBatchSampler(_Planned, BatchSampler):
    """A ``paddle.io.BatchSampler`` whose batches fit a cost budget instead of a fixed size.

    ``len(sampler)`` is exact before the first iteration, and
    ``len_for_epochs(range(E))`` over a whole run; call ``set_epoch(e)`` each
    epoch for fresh random batches. ``state_dict`` / ``load_state_dict`` resume
    mid-epoch (NOTE [ prefetch and resume ]).
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        ref_index: Any = None,
        cache_path: str | os.PathLike[str] | None = None,
        options: PlanOptions | None = None,
        batch_size: int | None = None,
        **shortcuts: Any,
    ) -> None:
        self.num_replicas, self.rank = 1, 0
        self._setup(
            dataset, lengths, length_fn, ref_index, cache_path, options, batch_size, shortcuts
        )

    __init__.__doc__ = _SAMPLER_DOC


class DistributedDynamicBatchSampler(_Planned, DistributedBatchSampler):
    """:class:`DynamicBatchSampler` for data-parallel training: each rank gets its share.

    Every rank yields the same number of batches and, step by step, batches of
    similar compute, with nothing dropped or repeated (NOTE [ equal steps
    without dropping or repeating ] and NOTE [ balanced steps ] in
    :mod:`dynbatch.sharding`). A subclass of
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
        cache_path: str | os.PathLike[str] | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        options: PlanOptions | None = None,
        batch_size: int | None = None,
        **shortcuts: Any,
    ) -> None:
        if num_replicas is None or rank is None:
            env = paddle.distributed.ParallelEnv()
            num_replicas = env.world_size if num_replicas is None else num_replicas
            rank = env.rank if rank is None else rank
        self.num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        self.rank = check_int("rank", rank)
        if self.rank >= self.num_replicas:
            raise InputError(f"rank must be in [0, {self.num_replicas - 1}], got rank={rank}")
        self.nranks, self.local_rank = self.num_replicas, self.rank  # paddle's names
        self._setup(
            dataset, lengths, length_fn, ref_index, cache_path, options, batch_size, shortcuts
        )
