"""The plans of epochs, the passes over them and where to resume: numpy only.

:class:`Epochs` is a run's epochs as the samplers see them (the plan cache, the pass
under way, the resume state), so the paddle adapters in :mod:`dynbatch.paddle.sampler` are
cursors over it. Each epoch's plan is :func:`~dynbatch.plan.epoch_plan.plan_epoch`'s (kept
importable from here, as :func:`~dynbatch.plan.equal_epochs.equal_batch_count` is); the saved
state's checks are :mod:`dynbatch.plan.resume_state`'s.

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

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from .._checks import InputError, InputTypeError, check_epochs, check_int
from .contract import Pass
from .epoch_plan import epoch_candidates, faster_candidate, plan_epoch
from .equal_epochs import equal_batch_count
from .lengths import check_pair_loss_tokens, check_plan_lengths
from .options import PlanOptions
from .reshard import check_global_update, deal_rest, rest_of
from .resume_state import STATE_VERSION, check_options, check_state, lengths_digest, per_run
from .sharding import ShardedPlan
from .windows import optimizer_steps

__all__ = [
    "Epochs",
    "Recent",
    "epoch_candidates",
    "equal_batch_count",
    "faster_candidate",
    "plan_epoch",
]

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
            "version": STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "num_replicas": self.num_replicas,
            "lengths": lengths_digest(self.lengths, self.loss_tokens),
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
        epoch, position, replicas = check_state(state)
        if state["lengths"] != lengths_digest(self.lengths, self.loss_tokens):
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
        check_options(state["options"], self.options.fingerprint())
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
        check_options(per_run(saved), per_run(self.options.fingerprint()))
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
