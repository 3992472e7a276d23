"""The plans of epochs, the passes over them and where to resume: numpy only.

:func:`plan_epoch` plans one epoch for every rank; :class:`Epochs` is a run's
epochs as the samplers see them (the plan cache, the pass under way, the
resume state), so the paddle adapters in :mod:`dynbatch.paddle.sampler` are cursors
over it.

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
    of the data. A loop that knows where it stands and needs no check (the
    Trainer integration, every epoch) calls ``seek(epoch, k)`` instead.

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
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_epochs,
    check_int,
)
from .contract import Pass
from .lengths import check_pair_loss_tokens, check_plan_lengths, is_pairs
from .options import UNDESCRIBED, PlanOptions
from .packs import plan_packed
from .pair_steptime import refuse_time_model_for
from .pairs import check_pair_options
from .planning import find_oversize, plan_draw
from .plans import Plan
from .reshard import check_global_update, deal_rest, rest_of
from .sharding import TOLERANCE, ShardedPlan, shard_checked
from .splits import epoch_seconds, plan_split_updates
from .windows import mix_updates, optimizer_steps

__all__ = [
    "Epochs",
    "Recent",
    "epoch_candidates",
    "equal_batch_count",
    "faster_candidate",
    "plan_epoch",
]

#: Epochs planned to fix the batch count of ``equal_epochs`` (NOTE [ equal epochs ]).
EQUAL_EPOCH_PROBES = 8
#: Draws of one epoch tried for ``equal_epochs`` before it is refused (NOTE [ equal epochs ]).
MAX_DRAWS = 1000


def equal_batch_count(lengths: Any, options: PlanOptions, num_replicas: int = 1) -> int:
    """The batch count every epoch gets under ``equal_epochs`` (NOTE [ equal epochs ]).

    NOTE [ equal epochs ]
        Random orders give a slightly different number of batches each epoch,
        and code that sizes a learning-rate schedule from ``len(sampler)``
        (paddlenlp's Trainer does) needs one number. The count is fixed as the
        largest over the first few epochs' plans, rounded up to a multiple of
        ``num_replicas``. An epoch with fewer batches has its heaviest batches
        split (never breaking the budget, never dropping or repeating). An
        epoch drawn with more batches, or (``drop_last``) with fewer samples
        left than the count, so that splitting would run out of batches to
        split and have to repeat samples, is drawn anew from ``(seed, epoch,
        draw)`` until it fits, so every epoch's plan is still a pure function
        of ``(seed, epoch)``. An epoch no draw of :data:`MAX_DRAWS` fits is an
        :class:`~dynbatch.InputError` naming ``equal_epochs`` (and
        ``drop_last``), never a repeat: on one rank a sample is never used
        twice in an epoch. On several ranks the one exception is the one of
        NOTE [ equal steps without dropping or repeating ]: when there are
        fewer samples than the count (fewer than ranks, or single-sample
        batches that do not divide among them), or when no draw avoids it and
        the draw taken would be padded by :func:`shard_plan` alone (its
        batches split into single samples that do not divide among the
        ranks), flagged repeats make it up.
        ``drop_last`` leaving no batch at all is refused too: no count fits it.
    """
    lens = check_plan_lengths(lengths)
    probes = EQUAL_EPOCH_PROBES if options.random_order else 1
    most = 0
    for epoch in range(probes):
        plan = plan_draw(lens, options, epoch, shuffle_batches=False)
        if not len(plan):
            raise InputError(_no_batch_left(len(lens), options, epoch))
        most = max(most, len(plan))
    return max(-(-most // num_replicas) * num_replicas, num_replicas)


def _no_batch_left(samples: int, options: PlanOptions, epoch: int) -> str:
    """Why ``equal_epochs`` cannot plan an epoch that ``drop_last`` left empty."""
    return (
        f"drop_last=True leaves no batch in epoch {epoch}: all {samples} samples fit in one "
        f"batch under max_cost={options.max_cost:g}, and drop_last drops it as the batch that "
        "ended only because the samples ran out; equal_epochs=True needs at least one batch per "
        "epoch. Pass drop_last=False, or a smaller max_cost"
    )


def _plannable(lens: NDArray[np.int64], options: PlanOptions) -> int:
    """Samples a plan can hold at most: all but those ``oversize="skip"`` leaves out."""
    if options.oversize != "skip":
        return len(lens)
    return int(len(lens) - find_oversize(lens, options=options).size)


def _draw_for_count(
    plan: Plan,
    lens: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_batches: int,
    num_replicas: int,
) -> Plan:
    """The first draw of ``epoch`` that splits into ``num_batches`` (NOTE [ equal epochs ])."""
    plannable = _plannable(lens, options)
    ceiling = max(-(-plannable // num_replicas) * num_replicas, num_replicas)
    if num_batches > ceiling:
        raise InputError(
            f"num_batches={num_batches} is more batches than equal_epochs can make from "
            f"{plannable} samples on num_replicas={num_replicas} without repeating samples; "
            f"give at most {ceiling}"
        )
    # fewer samples than batches (several ranks only): repeats cannot be avoided
    need = num_batches if plannable >= num_batches else 0
    draws = MAX_DRAWS if options.random_order else 1  # the other orders draw the same plan
    most_kept, fewest = 0, None
    fallback: Plan | None = None  # a draw even shard_plan would pad: repeats as documented
    for draw in range(draws):
        if draw:
            plan = plan_draw(lens, options, epoch, draw, shuffle_batches=False)
        kept = int(plan.sizes.sum())
        if len(plan) <= num_batches and kept >= need:
            return plan
        natural = max(-(-len(plan) // num_replicas) * num_replicas, num_replicas)
        if fallback is None and len(plan) <= num_batches and kept < natural:
            fallback = plan
        most_kept = max(most_kept, kept)
        fewest = len(plan) if fewest is None else min(fewest, len(plan))
    if fallback is not None:
        return fallback
    if most_kept < need:
        why = (
            f"with drop_last=True no draw kept {need} samples (at most {most_kept}), so "
            f"{num_batches} batches would repeat a sample. Pass drop_last=False or "
            "equal_epochs=False"
        )
    else:
        why = (
            f"every draw made more batches (at least {fewest}) or kept too few samples. Pass a "
            "larger num_batches or equal_epochs=False"
        )
    raise InputError(
        f"equal_epochs=True could not plan epoch {epoch} in exactly {num_batches} batches "
        f"in {draws} draw(s): {why}"
    )


def plan_epoch(
    lengths: Any,
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    *,
    num_batches: int | None = None,
    loss_tokens: Any = None,
) -> ShardedPlan:
    """Every rank's batches for ``epoch``: plan, then shard (``num_batches`` for equal epochs).

    With ``options.pack_len`` the batches are packed micro-batches: the fixed batch's updates,
    each packed into rows.

    Args:
        lengths: per-sample lengths (positive integers), e.g. token counts; or an ``[N, 2]``
            array of (source, target) lengths.
        options: the :class:`~dynbatch.PlanOptions` to plan with.
        epoch: the epoch, from 0: the random orders are a pure function of ``(seed, epoch)``.
        num_replicas: the ranks the plan is shared among (every rank plans the same).
        num_batches: with ``options.equal_epochs``, the batches every epoch has (default: as
            the sampler counts them).
        loss_tokens: per sample, the tokens that carry a loss (at most its length): what
            updates in ``"tokens"`` count, when only some tokens carry one (a masked
            prompt's do not); the cost still plans on the lengths.

    >>> sp = plan_epoch([3, 1, 4, 1, 5, 9, 2, 6], PlanOptions(max_cost=20, cost="linear"), 0, 2)
    >>> sp.num_steps, sorted(sp.plan.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7])
    """  # NOTE [ packed updates ] in dynbatch.plan.packs.epochs
    lengths = check_plan_lengths(lengths)
    if not isinstance(options, PlanOptions):
        raise InputTypeError(f"options must be a dynbatch.PlanOptions, got options={options!r}")
    if is_pairs(lengths):  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        check_pair_options(options, "plan_epoch")
    else:  # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime
        refuse_time_model_for(options.time_model, False, "plan_epoch")
    loss_tokens = check_pair_loss_tokens(loss_tokens, lengths)
    epoch = check_int("epoch", epoch)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1)
    if num_batches is not None:
        num_batches = check_int("num_batches", num_batches, minimum=1)
    if options.pack_len is not None:  # NOTE [ packed updates ], [ choosing packing per update ]
        return plan_packed(lengths, options, epoch, num_replicas, loss_tokens)
    if options.fixed_step_size is not None:  # NOTE [ the faster plan of each epoch ]
        return _faster_plan(lengths, options, epoch, num_replicas, loss_tokens)
    if options.time_model is not None:  # NOTE [ splitting updates at the step time ]
        return plan_split_updates(lengths, options, epoch, num_replicas)
    plan = plan_draw(lengths, options, epoch, shuffle_batches=False)  # sharding orders them
    if options.equal_epochs:
        if not len(plan):
            raise InputError(_no_batch_left(len(lengths), options, epoch))
        if num_batches is None:
            num_batches = equal_batch_count(lengths, options, num_replicas)
        plan = _draw_for_count(plan, lengths, options, epoch, num_batches, num_replicas)
    sharded = shard_checked(
        plan,
        lengths,
        num_replicas,
        epoch,
        num_batches if options.equal_epochs else None,
        TOLERANCE,
        options,
        owned=True,  # planned here, seen by no one else
    )
    if options.update_size is None:
        return sharded
    return mix_updates(sharded, lengths, options, epoch, loss_tokens)


def _faster_plan(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int,
    loss_tokens: NDArray[Any] | None,
) -> ShardedPlan:
    """The faster of ``options``' two plans of ``epoch`` (NOTE [ the faster plan of each epoch ]).

    NOTE [ the faster plan of each epoch ]
        :func:`~dynbatch.like_fixed` given a time model has two plans: the
        padding-free split (mixed updates of near-equal micro-batches) and
        the fixed batch's own updates cut at the step time (never predicted
        slower than the fixed batch). Which is faster depends on the draw:
        chosen once, on epoch 0, a later epoch of a small corpus could be
        predicted slower than the fixed batch. So every epoch plans both and
        keeps the one whose predicted time is less (the padding-free one on
        a tie). The choice is a pure function of the options, the lengths
        and the epoch, as each plan is: every rank, and a resumed run, make
        the same one, and ``steps_for_epochs`` counts the plan kept (both
        have the fixed batch's update count). An epoch is so never predicted
        slower than the time split, and so than the fixed batch.
    """
    plans, seconds = epoch_candidates(lengths, options, epoch, num_replicas, loss_tokens)
    return plans[faster_candidate(seconds)]


def faster_candidate(seconds: dict[str, float]) -> str:
    """Which of :func:`epoch_candidates`' plans an epoch keeps: the faster, the padding-free
    one on a tie (NOTE [ the faster plan of each epoch ])."""
    return "time split" if seconds["time split"] < seconds["padding-free"] else "padding-free"


def epoch_candidates(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int,
    loss_tokens: NDArray[Any] | None = None,
) -> tuple[dict[str, ShardedPlan], dict[str, float]]:
    """The two plans of ``epoch`` that ``fixed_step_size`` chooses between, and their seconds.

    Keys ``"padding-free"`` and ``"time split"``; the faster is kept, the padding-free one
    on a tie (NOTE [ the faster plan of each epoch ]). The Trainer's log reads it too.
    """
    model, step = options.time_model, options.fixed_step_size
    if model is None or step is None:
        raise InputError(
            "epoch_candidates: options must hold a time_model and a fixed_step_size (as "
            f"like_fixed(..., time_model=...) makes), got time_model={model!r}, "
            f"fixed_step_size={step!r}"
        )
    plans = {
        "padding-free": plan_epoch(
            lengths,
            options.replace(time_model=None, fixed_step_size=None),
            epoch,
            num_replicas,
            loss_tokens=loss_tokens,
        ),
        "time split": plan_split_updates(
            lengths,
            options.replace(order="shuffle", max_batch_size=step, fixed_step_size=None),
            epoch,
            num_replicas,
        ),
    }
    pad = options.pad_to_multiple_of
    seconds = {
        name: epoch_seconds(plan, lengths, model, pad, name="time_model")
        for name, plan in plans.items()
    }
    return plans, seconds


# -- a run's epochs: the plan cache, the passes, resume -------------------------------------------
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The values of the ``size`` keys used last, made on demand: the epoch in use and one more.

    >>> made = []
    >>> recent = Recent(2)
    >>> [recent.get(e, lambda e: made.append(e) or 10 * e) for e in (0, 1, 0, 2, 0, 1)]
    [0, 10, 0, 20, 0, 10]
    >>> made  # 1 was dropped for 2, as 0 was used since
    [0, 1, 2, 1]
    """

    def __init__(self, size: int = 2) -> None:
        self.size = check_int("size", size, minimum=1)
        self._items: dict[K, V] = {}

    def peek(self, key: K) -> V | None:
        """The value of ``key`` if kept, without making it or changing what is kept."""
        return self._items.get(key)

    def get(self, key: K, make: Callable[[K], V]) -> V:
        """The value of ``key``: kept, or ``make(key)``, dropping the one used longest ago."""
        if key in self._items:
            value = self._items.pop(key)
        else:
            value = make(key)
            if len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
        self._items[key] = value  # the newest last
        return value


_STATE_VERSION = 2
_STATE_KEYS = ("version", "epoch", "position", "num_replicas", "lengths", "options", "plan")


class Epochs:
    """A run's epochs: their plans, the pass under way and where the next one starts.

    What the samplers of :mod:`dynbatch.paddle.sampler` are cursors over, without
    paddle: ``set_epoch``, passes (:meth:`iterate`), ``len()``,
    ``state_dict`` / ``load_state_dict`` and :meth:`seek`. The two most
    recently used epochs' plans are kept.

    >>> epochs = Epochs([3, 1, 4, 1, 5, 9, 2, 6], PlanOptions(max_cost=12, cost="linear", seed=1))
    >>> len(epochs), list(epochs.iterate())
    (4, [[2, 4], [7], [5], [3, 1, 6, 0]])
    >>> epochs.seek(0, 2)  # the next pass resumes epoch 0 after two batches
    >>> list(epochs.iterate())
    [[5], [3, 1, 6, 0]]
    """

    def __init__(
        self, lengths: Any, options: PlanOptions, num_replicas: int = 1, *, loss_tokens: Any = None
    ) -> None:
        if not isinstance(options, PlanOptions):
            raise InputTypeError(f"options must be a dynbatch.PlanOptions, got options={options!r}")
        self.lengths = check_plan_lengths(lengths)
        self.loss_tokens = check_pair_loss_tokens(loss_tokens, self.lengths)
        self.options = options
        self.num_replicas: int = check_int("num_replicas", num_replicas, minimum=1)
        self.epoch = 0
        self._auto_epoch = True  # until set_epoch: NOTE [ a new epoch each pass ]
        self._advance = False  # the next pass plans the next epoch (auto mode only)
        self._resume = 0  # the batch the next iteration of self.epoch starts at
        self._yielded = 0  # batches of the current pass handed out so far (absolute position)
        self._pass = Pass(epoch=0, start=0, serial=0)
        self._plans: Recent[int, ShardedPlan] = Recent(2)
        self._count: int | None = None  # the batch count of every epoch, with equal_epochs
        self._dealt: tuple[int, ShardedPlan] | None = None  # NOTE [ resume on another ... ]
        self.plan(0)  # plans now: bad options fail here, not at the first batch

    # -- plans ------------------------------------------------------------------------------------
    def plan(self, epoch: int | None = None) -> ShardedPlan:
        """Every rank's batches of ``epoch`` (default: the current one), step-major; kept."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch)
        if self._dealt is not None and self._dealt[0] == epoch:
            return self._dealt[1]  # the rest of a state saved on other ranks
        return self._plans.get(epoch, self._make)

    def _make(self, epoch: int) -> ShardedPlan:
        if self.options.equal_epochs and self._count is None:
            self._count = equal_batch_count(self.lengths, self.options, self.num_replicas)
        return plan_epoch(
            self.lengths,
            self.options,
            epoch,
            self.num_replicas,
            num_batches=self._count,
            loss_tokens=self.loss_tokens,
        )

    def _sized(self, epoch: int) -> ShardedPlan:
        """``epoch``'s plan, kept or not (sizing a run must not evict the epochs in use)."""
        if self._dealt is not None and self._dealt[0] == epoch:
            return self._dealt[1]
        kept = self._plans.peek(epoch)
        return self._make(epoch) if kept is None else kept

    def len_for_epochs(self, epochs: Iterable[int]) -> int:
        """Batches a rank yields over ``epochs`` (e.g. ``range(E)``): exact, for schedules."""
        return sum(self._sized(e).num_steps for e in check_epochs(epochs))

    def steps_for_epochs(self, epochs: Iterable[int]) -> int:
        """Optimizer updates over ``epochs``: the plan's updates, or one per batch."""
        return sum(optimizer_steps(self._sized(e), self.lengths) for e in check_epochs(epochs))

    # -- passes -----------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Plan the given epoch next. Keeps a resume position loaded for that same epoch.

        NOTE [ a new epoch each pass ]
            ``paddle.io.BatchSampler(shuffle=True)`` gives a new order every
            pass without being asked, so a loop that never calls ``set_epoch``
            must not see the same batches every epoch. Until ``set_epoch`` is
            first called, each new pass over the sampler plans the next epoch
            (the first pass, or the one after ``load_state_dict``, plans the
            epoch it holds). Once called, ``set_epoch`` alone decides. A state
            saved once such a pass is done (every batch yielded, or
            ``consumed_batches`` all of them) resumes at the next epoch, as the
            next pass would.
        """
        epoch = check_int("epoch", epoch)
        if epoch != self.epoch or self._advance:
            self._resume = 0
        self.epoch = epoch
        self._auto_epoch = self._advance = False

    def seek(self, epoch: int, position: int = 0) -> None:
        """``set_epoch(epoch)``, and the next pass starts after ``position`` batches of it.

        The cheap, unchecked resume of a loop that knows where it stands: no
        state dict, no digest (NOTE [ prefetch and resume ]).
        """
        epoch = check_int("epoch", epoch)
        position = check_int("position", position)
        total = self.plan(epoch).num_steps
        if position > total:
            raise InputError(
                f"position must be in [0, {total}] (batches in epoch {epoch}), "
                f"got position={position}"
            )
        self.set_epoch(epoch)
        self._resume = self._yielded = position

    def _upcoming(self) -> tuple[int, int]:
        """The epoch the next pass plans and the batch it starts at."""
        if self._advance:
            return self.epoch + 1, 0
        return self.epoch, self._resume

    def current_pass(self) -> Pass:
        """The iteration under way (the last one begun); before any, the one the next will be."""
        if self._pass.serial == 0:
            epoch, start = self._upcoming()
            return Pass(epoch=epoch, start=start, serial=0)
        return self._pass

    def iterate(self, rank: int = 0) -> Iterator[list[int]]:
        """A pass: ``rank``'s batches of the epoch it plans, from where it starts, as lists."""
        self.epoch, self._resume = self._upcoming()
        self._advance = self._auto_epoch
        epoch = self.epoch
        indices, offsets = self.plan(epoch).for_rank(rank).lists()
        start, self._resume = self._resume, 0
        self._pass = Pass(epoch=epoch, start=start, serial=self._pass.serial + 1)
        self._yielded = start
        for k in range(start, len(offsets) - 1):
            self._yielded = k + 1
            yield indices[offsets[k] : offsets[k + 1]]

    def __len__(self) -> int:
        """Batches the next pass yields; during an unasked pass, that pass's."""
        total = self._sized(self.epoch).num_steps
        if self._advance and self._pass.serial and self._yielded < total:
            return total - self._pass.start  # a pass under way: its own length
        epoch, start = self._upcoming()
        return self._sized(epoch).num_steps - start

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """Where this epoch stands; see NOTE [ prefetch and resume ] for ``consumed_batches``."""
        epoch = self.epoch
        total = self.plan().num_steps
        if consumed_batches is None:
            position = self._yielded if self._pass.epoch == self.epoch else self._resume
        else:
            position = check_int("consumed_batches", consumed_batches)
            if position > total:
                raise InputError(
                    f"consumed_batches must be in [0, {total}] (batches in epoch {self.epoch}), "
                    f"got consumed_batches={consumed_batches}"
                )
        if self._advance and position >= total:  # an unasked pass is done: the next epoch's
            epoch, position = self._upcoming()
        sharded = self.plan(epoch)
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "num_replicas": self.num_replicas,
            "lengths": _lengths_digest(self.lengths, self.loss_tokens),
            "options": self.options.fingerprint(),
            "plan": sharded.digest(),
            # NOTE [ resume on another number of ranks ] in dynbatch.plan.reshard
            "rest": rest_of(sharded, position, epoch),
            "dealt": self._dealt is not None and self._dealt[0] == epoch,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration yields epoch ``state["epoch"]`` after ``position`` batches.

        Everything is checked before anything is changed (NOTE [ resume fingerprint ]).
        """
        epoch, position, replicas = _check_state(state)
        if state["lengths"] != _lengths_digest(self.lengths, self.loss_tokens):
            raise InputError(
                "this sampler state was saved for different lengths or loss_tokens (another "
                "dataset, or lengths measured differently): resuming from it would feed the wrong "
                "samples"
            )
        dealt = state.get("dealt", False)
        if not isinstance(dealt, bool):
            raise InputTypeError(
                f"state['dealt'] must be True or False, got state['dealt']={dealt!r} "
                f"({type(dealt).__name__})"
            )
        if replicas != self.num_replicas or dealt:
            self._load_rest(state, epoch, replicas, position)
            return
        _check_options(state["options"], self.options.fingerprint())
        sharded = self.plan(epoch)
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
        self._dealt = None

    def _load_rest(
        self, state: Mapping[str, Any], epoch: int, replicas: int, position: int
    ) -> None:
        """Resume a state saved on ``replicas`` ranks (NOTE [ resume on another number of ranks ]
        in :mod:`dynbatch.plan.reshard`): the saved rest of its epoch, dealt to these."""
        saved = state["options"]
        if not isinstance(saved, Mapping):
            raise InputTypeError(f"state['options'] must be a dict, got {saved!r}")
        check_global_update(saved, replicas, self.options, self.num_replicas)
        _check_options(_per_run(saved), _per_run(self.options.fingerprint()))
        if "rest" not in state:
            raise InputError(
                f"this sampler state was saved with num_replicas={replicas} by a dynbatch "
                "release that kept no rest of its epoch: it resumes only on "
                f"num_replicas={replicas}, this sampler has num_replicas={self.num_replicas}"
            )
        dealt = deal_rest(
            state["rest"], self.lengths, self.options, self.num_replicas, epoch, position, replicas
        )
        self.epoch = epoch
        self._resume = self._yielded = 0
        self._advance = False
        self._dealt = (epoch, dealt)


def _lengths_digest(lengths: NDArray[np.int64], loss_tokens: NDArray[np.int64] | None) -> str:
    h = hashlib.blake2b(lengths.tobytes(), digest_size=16)
    if is_pairs(lengths):  # not the 1-D lengths of the same bytes
        h.update(b"pairs")
    if loss_tokens is not None:
        h.update(b"loss_tokens" + loss_tokens.tobytes())
    return h.hexdigest()


def _check_state(state: Any) -> tuple[int, int, int]:
    """The saved epoch, position and rank count, once the state's form is checked."""
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
    for key in ("lengths", "plan"):
        if not isinstance(state[key], str):
            raise InputTypeError(
                f"state['{key}'] must be a str (a digest), got state['{key}']="
                f"{state[key]!r} ({type(state[key]).__name__})"
            )
    return epoch, position, int(replicas)


#: Options that scale with a rank's share, so may differ on another number of ranks: one
#: card's budget (the rest is cut to fit it) and the fixed batch's per-rank step.
_PER_RANK = ("max_cost", "max_batch_size", "fixed_step_size")


def _per_run(options: Any) -> Any:
    """Fingerprinted options without those that scale with the ranks
    (NOTE [ resume on another number of ranks ]): every other one must be the saved run's, as
    on the same ranks. A cost's own budgets (``"tokens"``' micro-batch share) scale too: its
    kinds are kept."""
    if not isinstance(options, Mapping):
        return options
    kept = {k: v for k, v in options.items() if k not in _PER_RANK}
    if isinstance(kept.get("cost"), str):
        kept["cost"] = re.sub(r"<=[^;]*", "", kept["cost"])
    return kept


def _check_options(saved: Any, here: Mapping[str, Any]) -> None:
    """Refuse saved options other than ``here``, naming each that differs."""
    if not isinstance(saved, Mapping):
        raise InputTypeError(f"state['options'] must be a dict, got {saved!r}")
    if set(saved) != set(here):
        raise InputError(
            f"state['options'] must hold every option ({', '.join(sorted(here))}), got {saved!r}"
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


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _typed(value: Any, other: Any) -> str:
    """``repr(value)``, with its type when ``other``'s type is another (``1`` against ``'1'``)."""
    kinds = {type(value), type(other)}
    if len(kinds) == 1 or kinds <= {int, float} or type(None) in kinds:
        return repr(value)
    return f"{value!r} ({type(value).__name__})"
