"""Paddle batch samplers over :class:`~dynbatch.plan.epochs.Epochs`: adapters that import paddle.

Each sampler is a cursor: the plans, passes and resume state (NOTE [ prefetch and resume ],
NOTE [ resume fingerprint ]) live in :mod:`dynbatch.plan.epochs`; the
sampler adds its rank and paddle's base class, whose ``__init__`` runs.

NOTE [ batch_size, read back ]
    ``sampler.batch_size`` is the fixed batch the sampler was told to train like
    (``batch_size=32`` reads back 32, per rank), and None when it was built
    from a budget (``max_cost=...`` or ``options=``): batches then have no one
    size. The cap on a batch's samples is ``sampler.max_batch_size``, as in
    :class:`~dynbatch.PlanOptions` (None: no cap). Batches are the plan's:
    neither attribute is a size every batch has.

    What paddle does with ``batch_sampler.batch_size``: ``paddle.io.DataLoader``
    given ``batch_sampler=`` ignores it (its own ``batch_size`` is None) and
    iterates the sampler. Code that rebuilds the sampler reads it: the
    DataLoader's ``num_workers`` autotuning (``paddle.incubate.autotune``) times
    a plain ``BatchSampler`` of that size; auto-parallel's data-parallel mode and
    ``shard_dataloader`` replace the sampler with a ``DistributedBatchSampler``
    of ``batch_size / dp_world_size``, losing the dynamic batches; and
    paddlenlp's ``Trainer.evaluation_loop`` logs it and sizes
    ``max_eval_iters`` with it (``DynamicBatchTrainer`` evaluates dynamic
    batches in a loop of its own). With None, those paths fail loudly (a
    ``TypeError``) instead of sizing anything by a wrong number.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_dataset,
    check_int,
    check_replicas,
)
from .._optional import require
from ..plan.contract import Pass
from ..plan.epochs import Epochs
from ..plan.lengths import check_pair_loss_tokens, check_plan_lengths, compute_lengths, is_pairs
from ..plan.options import PlanOptions, refuse_unknown_options, resolve_options
from ..plan.pair_steptime import PAIR_FLAT_STEP, PairStepTimeModel
from ..plan.plans import Plan
from ..plan.recipes import LIKE_FIXED_KEYWORDS, like_fixed, refuse_update_size
from ..plan.sharding import ShardedPlan
from ..plan.steptime import FLAT_STEP, StepTimeModel

paddle = require("paddle", "dynbatch's samplers")
from paddle.io import BatchSampler, DistributedBatchSampler  # noqa: E402

__all__ = ["DistributedDynamicBatchSampler", "DynamicBatchSampler"]


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


def resolve_lengths(
    dataset: Any,
    lengths: Any,
    length_fn: Callable[[Any], Any] | None,
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
        lens = check_plan_lengths(lengths)
        if dataset is not None and len(dataset) != len(lens):
            raise InputError(
                f"lengths has {len(lens)} entries but the dataset has {len(dataset)} samples; "
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


def resolve_rank(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``, each from paddle's parallel environment where None; checked."""
    if num_replicas is None or rank is None:
        env = paddle.distributed.ParallelEnv()
        num_replicas = env.world_size if num_replicas is None else num_replicas
        rank = env.rank if rank is None else rank
    replicas = check_replicas(num_replicas)
    index = check_int("rank", rank)
    if index >= replicas:
        raise InputError(f"rank must be in [0, {replicas - 1}], got rank={rank}")
    return replicas, index


def default_time_model(where: str, pairs: bool = False) -> StepTimeModel | PairStepTimeModel | None:
    """None on a CPU; on an accelerator, :data:`~dynbatch.plan.steptime.FLAT_STEP` (for
    (source, target) pairs :data:`~dynbatch.plan.pair_steptime.PAIR_FLAT_STEP`) and a warning.

    NOTE [ no time model on an accelerator ]
        The recipe's padding-free split pays on a CPU, where a step costs
        what its tokens cost. On a GPU below its knee a step costs the same
        at any size, and four micro-batches an update make an epoch 2-4x
        slower than the fixed batch (measured step times of BERT-base on an
        H100). Without a measured step time the sampler cannot know where a
        device's knee is, so on an accelerator it assumes the step is flat:
        each update runs as one batch, the fixed batch's own speed, never
        slower. It says so once; ``time_model=`` (``dynbatch.calibrate``'s,
        or a fitted :class:`~dynbatch.plan.steptime.StepTimeTable`) lets it cut
        updates where that is faster. Updates in ``"tokens"``, or a sorted
        order, keep the recipe's split (:func:`~dynbatch.like_fixed` refuses a
        step time there), so there it assumes nothing and says nothing.
        Pairs get the same default, a flat step of two lengths (a step time
        of one length is refused for pairs:
        NOTE [ a step time of two lengths ] in :mod:`dynbatch.plan.pair_steptime`).
        What makes a step
        flat below the knee, a fixed cost a step (kernel launches, the
        optimizer), holds for an encoder–decoder's two sides as for one
        length; no encoder–decoder's step times were measured here, so this
        is the same cautious assumption, never slower than the fixed batch,
        not a measurement. Each update whole is the fixed batch's own step,
        ``cost(B, Ls, Lt)`` at the update's longest source and target at
        most, so it never needs more memory than the fixed batch did.
    """
    device = str(paddle.device.get_device())
    if device.startswith("cpu"):
        return None
    warnings.warn(
        f"{where}: training on {device} with no time_model, so each update of batch_size runs as "
        "one batch, the fixed batch's own speed (the CPU's padding-free split would be slower "
        "on an accelerator). Pass time_model= (dynbatch.calibrate(...).time_model, or "
        "dynbatch.StepTimeTable.load(path).fit()) to cut updates where that is faster, or "
        "options=dynbatch.like_fixed(lengths, batch_size) for the CPU's split",
        stacklevel=4,
    )
    return PAIR_FLAT_STEP if pairs else FLAT_STEP


class _Cursor:
    """What both samplers share: a cursor over an :class:`~dynbatch.plan.epochs.Epochs`.

    The plans, passes and resume state are the ``Epochs``'; the samplers add
    the rank, paddle's base class and its attribute names. Implements
    :class:`~dynbatch.plan.contract.PlanSource`.
    """

    num_replicas: int
    rank: int
    batch_size: Any  # paddle's is an int; ours is the fixed batch told, or None (NOTE above)
    max_batch_size: int | None
    _fixed_batch: int | None
    _epochs: Epochs

    def _plan(
        self,
        dataset: Any,
        lengths: Any,
        length_fn: Callable[[Any], Any] | None,
        ref_index: Any,
        cache_path: str | os.PathLike[str] | None,
        options: PlanOptions | None,
        batch_size: int | None,
        loss_tokens: Any,
        shortcuts: dict[str, Any],
    ) -> PlanOptions:
        """Resolve the lengths and options and plan epoch 0; the options paddle's base reads."""
        self.lengths = resolve_lengths(dataset, lengths, length_fn, ref_index, cache_path)
        self.loss_tokens = check_pair_loss_tokens(loss_tokens, self.lengths)
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
            # named as the user called it; like_fixed's own keywords pass on to it
            refuse_unknown_options(shortcuts, type(self).__name__, LIKE_FIXED_KEYWORDS)
            refuse_update_size(shortcuts, batch_size, type(self).__name__)
            unit, order = shortcuts.get("update_unit", "samples"), shortcuts.get("order", "bucket")
            # NOTE [ no time model on an accelerator ]: where like_fixed follows a step time
            follows = unit == "samples" and order in ("bucket", "shuffle")
            # packing as asked: rows, chosen per update only by a time model given
            follows = follows and shortcuts.get("pack_len") is None
            if shortcuts.get("time_model") is None and follows:
                flat = default_time_model(type(self).__name__, is_pairs(self.lengths))
                shortcuts = {**shortcuts, "time_model": flat}
            options = like_fixed(
                self.lengths,
                batch_size,
                num_replicas=self.num_replicas,
                loss_tokens=self.loss_tokens,
                **shortcuts,
            )
            shortcuts = {}
        self._fixed_batch = None if batch_size is None else int(batch_size)  # like_fixed checked it
        self.options = opts = resolve_options(
            options, shortcuts, type(self).__name__, pairs=is_pairs(self.lengths)
        )
        self._epochs = Epochs(self.lengths, opts, self.num_replicas, loss_tokens=self.loss_tokens)
        # the options under the names paddle code reads (never assigned again)
        self.max_cost, self.cost, self.seed, self.order = (
            opts.max_cost,
            opts.cost,
            opts.seed,
            opts.order,
        )
        return opts

    def _name_for_paddle(self, dataset: Any, opts: PlanOptions) -> None:
        """After paddle's ``__init__``: its attributes say what this sampler does."""
        self.dataset = dataset
        self.batch_size = self._fixed_batch  # NOTE [ batch_size, read back ]
        self.max_batch_size = opts.max_batch_size
        self.drop_last, self.shuffle = opts.drop_last, opts.random_order

    @property
    def epoch(self) -> int:
        """The epoch planned (or under way); ``set_epoch`` chooses it."""
        return self._epochs.epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:  # paddle's __init__ sets 0
        self._epochs.epoch = check_int("epoch", epoch)

    # -- the contract (dynbatch.plan.contract.PlanSource) -----------------------------------------
    def epoch_plan(self, epoch: int | None = None) -> ShardedPlan:
        """Every rank's batches of ``epoch``, step-major.

        Args:
            epoch: the epoch; default: the current one.
        """
        return self._epochs.plan(epoch)

    def batches(self, epoch: int | None = None) -> Plan:
        """This rank's planned batches for ``epoch``, in order.

        Args:
            epoch: the epoch; default: the current one.
        """
        return self.epoch_plan(epoch).for_rank(self.rank)

    def padding_mask(self, epoch: int | None = None) -> NDArray[np.bool_]:
        """True for this rank's batches that repeat samples only to even out step counts.

        Args:
            epoch: the epoch; default: the current one.
        """
        return self.epoch_plan(epoch).padding_for_rank(self.rank)

    def current_pass(self) -> Pass:
        """The iteration under way (the last one begun); before any, the one the next will be."""
        return self._epochs.current_pass()

    def len_for_epochs(self, epochs: Iterable[int]) -> int:
        """Batches this rank yields over ``epochs``: exact, for schedules.

        Args:
            epochs: the epochs, e.g. ``range(E)``.
        """
        return self._epochs.len_for_epochs(epochs)

    def steps_for_epochs(self, epochs: Iterable[int]) -> int:
        """Optimizer updates over ``epochs`` (e.g. ``range(E)``), for the LR schedule.

        The plan's updates (``options.update_size``), or one per batch. Needs
        no optimizer, so the schedule can be made before it.

        Args:
            epochs: the epochs, e.g. ``range(E)``.
        """
        return self._epochs.steps_for_epochs(epochs)

    # -- paddle's sampler interface --------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Plan this epoch next: its batches are drawn from ``(seed, epoch)``.

        Until it is first called, each new pass plans the next epoch (as paddle's shuffled
        ``BatchSampler`` gives a new order every pass); once called, it alone decides. Keeps
        a resume position loaded for that same epoch.

        Args:
            epoch: the epoch to plan, from 0.
        """  # NOTE [ a new epoch each pass ] in dynbatch.plan.epochs
        self._epochs.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        return self._epochs.iterate(self.rank)

    def __len__(self) -> int:
        return len(self._epochs)

    # -- resume (NOTE [ prefetch and resume ] in dynbatch.plan.epochs) -----------------------------
    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """Where this epoch stands, to resume from with :meth:`load_state_dict`.

        Args:
            consumed_batches: the batches of this epoch training finished (counting any
                before a resume); default: those yielded. Pass it: ``paddle.io.DataLoader``
                takes batches ahead of training, and a state of what was yielded would skip
                them on resume.
        """  # NOTE [ prefetch and resume ] in dynbatch.plan.epochs
        return self._epochs.state_dict(consumed_batches)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration yields epoch ``state["epoch"]`` after ``position`` batches.

        Everything is checked before anything is changed: a state saved by a sampler that plans
        other batches (other lengths, options or plan) is refused, naming what differs, since it
        would resume on the wrong samples.

        Args:
            state: what :meth:`state_dict` returned.
        """  # NOTE [ resume fingerprint ] in dynbatch.plan.epochs
        self._epochs.load_state_dict(state)

    def seek(self, epoch: int, position: int = 0) -> None:
        """``set_epoch(epoch)``, the next pass starting after ``position`` batches: no checks.

        Args:
            epoch: the epoch to plan.
            position: the batches of it to skip (already trained).
        """
        self._epochs.seek(epoch, position)


_SAMPLER_DOC = """
    Args:
        dataset: the dataset (map-style: ``len()`` and ``[i]``); needed with ``length_fn`` or
            ``ref_index``, and checked against ``lengths`` for size when both are given. None
            with ``lengths``: the sampler then yields indices into ``lengths``.
        lengths: each sample's length (tokens), an int array or sequence, or an ``[N, 2]`` array
            of (source, target) lengths, each batch then padding-free on both sides; the plan is
            made from these alone. Give them, or a way to measure them: ``length_fn`` or
            ``ref_index``.
        length_fn: ``length_fn(sample) -> int`` (or ``-> (source, target)``), called once per
            sample of ``dataset`` (its error names the sample it failed on).
        ref_index: the field of each sample whose size is its length (an index into a tuple
            sample, a key of a dict one), instead of ``length_fn``.
        cache_path: store measured lengths here (``.npz``) keyed by a dataset
            fingerprint; a later run with the same dataset loads them.
        options: a :class:`~dynbatch.PlanOptions`; or give its fields as keywords
            (``**shortcuts``), not both. For pairs, a ``time_model`` is a step time of two
            lengths, :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`. With
            ``pack_len`` each batch is a packed micro-batch: a list of sample indices, row
            after row, for
            :class:`~dynbatch.PackCollator` (the fixed batch's own updates, packed, so an epoch
            has the same updates); with ``pack_len`` and ``time_model`` each update runs packed,
            split or whole, whichever the step time predicts fastest: collate with
            ``PackCollator.for_sampler(sampler)``, which lays each micro-batch out as the plan
            priced it.
        batch_size: the fixed batch (per rank) to train like, instead of ``options``:
            :func:`~dynbatch.like_fixed` plans padding-free micro-batches in updates of that
            many samples, lengths mixed, so an epoch has the fixed batch's updates and no step
            needs more memory than its worst batch. Other keywords are options (``max_cost=``
            then is a budget for the micro-batches).
        loss_tokens: per-sample counts of the tokens that carry a loss (at most the sample's
            length), for token losses with masked prompts: updates in ``"tokens"`` count them,
            so each update averages over the tokens it learns from, while the cost plans on
            ``lengths``.
        **shortcuts: :class:`~dynbatch.PlanOptions` fields as keywords (``max_cost=...,
            cost=..., order=..., seed=..., max_batch_size=..., batch_size_multiple=...,
            pad_to_multiple_of=..., oversize=..., drop_last=..., bucket_width=...,
            equal_epochs=..., balance=..., update_size=..., update_unit=..., pack_len=...,
            time_model=...``); with ``batch_size``, the options of :func:`~dynbatch.like_fixed`.
"""


class DynamicBatchSampler(_Cursor, BatchSampler):
    """A ``paddle.io.BatchSampler`` whose batches fit a cost budget instead of a fixed size.

    It takes one length per sample, ``[N]``, or an ``[N, 2]`` array of (source, target)
    lengths of an encoder–decoder's pairs, each batch then padding-free on both sides, its
    cost ``cost(n, Ls, Lt)`` and updates in ``"tokens"`` counting target tokens, the tokens
    their loss is over.

    ``len(sampler)`` is exact before the first iteration, and
    ``len_for_epochs(range(E))`` over a whole run; call ``set_epoch(e)`` each
    epoch for fresh random batches. ``state_dict`` / ``load_state_dict`` resume
    mid-epoch, exactly after the batches training finished (pass
    ``consumed_batches``: the DataLoader prefetches batches ahead of training).

    Attributes:
        batch_size: the fixed batch given as ``batch_size=``, else None: batches of a budget
            have no one size, so code that would size something by it fails loudly instead
            (paddle's own loader ignores it).
        max_batch_size: the most samples a batch holds (None: no cap).
        options: the :class:`~dynbatch.PlanOptions` the plans are made with.

    >>> sampler = DynamicBatchSampler(lengths=[5, 9, 3, 12] * 50, batch_size=32)
    >>> sampler.batch_size, sampler.max_batch_size
    (32, 8)
    >>> DynamicBatchSampler(lengths=[5, 9, 3, 12], max_cost=1000).batch_size is None
    True
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], Any] | None = None,
        ref_index: Any = None,
        cache_path: str | os.PathLike[str] | None = None,
        options: PlanOptions | None = None,
        batch_size: int | None = None,
        loss_tokens: Any = None,
        **shortcuts: Any,
    ) -> None:
        self.num_replicas, self.rank = 1, 0
        opts = self._plan(
            dataset,
            lengths,
            length_fn,
            ref_index,
            cache_path,
            options,
            batch_size,
            loss_tokens,
            shortcuts,
        )
        BatchSampler.__init__(  # the indices stand in for a dataset given as lengths alone
            self,
            dataset=range(len(self.lengths)) if dataset is None else dataset,
            batch_size=opts.max_batch_size or 1,
            drop_last=opts.drop_last,
        )
        self._name_for_paddle(dataset, opts)

    __init__.__doc__ = _SAMPLER_DOC


class DistributedDynamicBatchSampler(_Cursor, DistributedBatchSampler):
    """:class:`DynamicBatchSampler` for data-parallel training: each rank gets its share.

    Every rank yields the same number of batches (a rank with one more would wait forever
    for the others), with nothing dropped or repeated: the heaviest batches are split until
    the count divides the ranks. Step by step the ranks' batches are of similar compute
    (tokens, not the memory cost), so no rank waits long for the slowest. Every rank plans
    the same batches from ``(seed, epoch)``, so no communication is needed. A subclass of
    ``paddle.io.DistributedBatchSampler``, so ``paddlenlp.trainer.Trainer`` calls its
    ``set_epoch``.

    ``batch_size`` reads back the fixed batch per rank given as ``batch_size=``
    (else None), ``max_batch_size`` the cap on a batch.
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], Any] | None = None,
        ref_index: Any = None,
        cache_path: str | os.PathLike[str] | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        options: PlanOptions | None = None,
        batch_size: int | None = None,
        loss_tokens: Any = None,
        **shortcuts: Any,
    ) -> None:
        self.num_replicas, self.rank = resolve_rank(num_replicas, rank)
        opts = self._plan(
            dataset,
            lengths,
            length_fn,
            ref_index,
            cache_path,
            options,
            batch_size,
            loss_tokens,
            shortcuts,
        )
        DistributedBatchSampler.__init__(  # sets nranks, local_rank, epoch (0): paddle's names
            self,
            range(len(self.lengths)) if dataset is None else dataset,
            opts.max_batch_size or 1,
            num_replicas=self.num_replicas,
            rank=self.rank,
            shuffle=opts.random_order,
            drop_last=opts.drop_last,
        )
        self._name_for_paddle(dataset, opts)

    __init__.__doc__ = _SAMPLER_DOC.replace(
        "        options: ",
        "        num_replicas: the number of ranks; default: paddle's parallel environment.\n"
        "        rank: this process's rank, in ``[0, num_replicas)``; default: paddle's parallel\n"
        "            environment.\n"
        "        options: ",
        1,
    )
