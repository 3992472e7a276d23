"""The training of one mode, in a process of its own (so its time and memory are its own).

A mode is how batches are made: ``fixed`` (a shuffled batch of --batch-size, the study's
baseline); ``dynamic``, dynbatch's default recipe: the sampler is told the fixed batch
(``batch_size=``) and plans padding-free micro-batches in updates of as many samples,
lengths mixed (NOTE [ the fixed batch's recipe ]); ``group``: Hugging Face's
``group_by_length`` (:class:`LengthGroupedBatchSampler`, a peer, not a dynbatch feature:
batches of --batch-size of near-equal lengths, every batch an update); ``fill``:
micro-batches at the knee of the step time fitted by :func:`dynbatch.calibrate`, within the
fixed batch's worst-batch memory, or with --time-table at the knee of a device's measured
step times, within its largest measured batch (fewer, larger updates: the plan that device
would train); ``pack``: the fixed batch's updates as ``dynamic`` makes them, each
micro-batch's reviews packed into rows of --max-len tokens, each review alone in its row
(NOTE [ a packed classifier ]); ``shuffle``, ``ascending`` and ``bucket`` (dynbatch orders
under the cost given by --cost / --max-cost, the study's way: one batch, one update), and
``calibrated``: bucket order under a :class:`dynbatch.MemoryCost` calibrated on this model,
with the fixed mode's worst-batch peak as the memory target, so both get the same memory.

Every mode starts from the same weights with the same seed, makes each update the mean over
its samples (:class:`dynbatch.GradientAccumulator`), records per step the loss, the batch
size, the training time so far and the allocator's peak memory, and takes the dev accuracy
after every epoch; with --target-accuracy it stops after the first epoch that reaches it
(--epochs is the cap, and the rate's schedule spans --epochs). With a time budget (the
fixed mode's training time, by default) a dynamic mode keeps training, epoch after epoch,
until the fixed mode's time is used: the same compute for both. Its dev accuracy is taken
both when it has seen as many samples as the fixed mode and at the end of the budget.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import TokenIds, progress, say

MODES = (
    "fixed",
    "dynamic",
    "fill",
    "shuffle",
    "ascending",
    "bucket",
    "calibrated",
    "group",
    "pack",
)
#: the modes run when --modes is not given (``group`` is a peer, ``pack`` a choice: on request)
DEFAULT_MODES = MODES[:-2]
#: the modes whose every batch is an update of --batch-size samples: no lr scaling
FIXED_SIZE = ("fixed", "group")
#: the modes that calibrate the model's memory against the fixed mode's worst batch
CALIBRATED = ("fill", "calibrated")
#: a BERT with BERT-base's head width (64), small enough for a CPU: memory grows with the
#: head width the way it does in bert-base, which is what the calibrated cost has to get right
TINY = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 512,
}


class LengthGroupedBatchSampler:
    """Hugging Face's ``group_by_length``, as a paddle batch sampler: the peer a GPU user picks.

    Each epoch a permutation of the samples from ``(seed, epoch)`` is cut into mega-batches
    of ``mega_batch_mult * batch_size``; each is sorted by length, longest first, and cut into
    batches of ``batch_size`` (transformers' ``LengthGroupedSampler``; it also swaps the
    longest sample into the first batch, to run out of memory early, and on fewer than
    ``200 * batch_size`` samples it shrinks the mega-batch to a quarter of the data: both
    left out here). Every batch is an update, as in the fixed mode: the same update count,
    each of near-equal lengths.

    >>> s = LengthGroupedBatchSampler([3, 1, 6, 2, 5, 4], batch_size=2, mega_batch_mult=3)
    >>> [s.lengths[b].tolist() for b in s], len(s)
    ([[6, 5], [4, 3], [2, 1]], 3)
    """

    def __init__(
        self, lengths: Any, batch_size: int, seed: int = 0, mega_batch_mult: int = 50
    ) -> None:
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.mega = mega_batch_mult * batch_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.lengths.size)
        for start in range(0, perm.size, self.mega):
            chunk = perm[start : start + self.mega]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            for j in range(0, chunk.size, self.batch_size):
                yield chunk[j : j + self.batch_size].tolist()

    def __len__(self) -> int:
        n, mega, b = self.lengths.size, self.mega, self.batch_size
        return sum(-(-min(mega, n - start) // b) for start in range(0, n, mega))


#: positions BERT takes (the tiny config's and bert-base-chinese's max_position_embeddings)
MAX_POSITIONS = 512


def build_model(meta: dict[str, Any], recompute: bool = False) -> Any:
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification

    if meta["model"] == "tiny":
        config = BertConfig(
            vocab_size=meta["vocab_size"],
            max_position_embeddings=MAX_POSITIONS,
            num_labels=meta["num_labels"],
            pad_token_id=meta["pad_id"],
            **TINY,
        )
        model = BertForSequenceClassification(config)
    else:
        model = BertForSequenceClassification.from_pretrained(
            meta["model"], num_labels=meta["num_labels"]
        )
    if recompute:
        from paddle.distributed.fleet.utils import recompute as checkpoint

        for layer in model.bert.encoder.layers:
            layer.forward = functools.partial(checkpoint, layer.forward)
    return model


def make_optimizer(model: Any, lr: Any) -> Any:
    import paddle

    return paddle.optimizer.AdamW(
        lr,
        parameters=model.parameters(),
        weight_decay=0.01,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )


def make_schedule(lr: float, per_epoch: list[int], args: argparse.Namespace) -> Any:
    """Linear warm-up over ``--warmup`` of the first epoch's steps, then linear decay to 0 at
    the run's last step (the steps of every epoch are known before training); with a time
    budget the run's length is not known, so the rate stays constant after the warm-up."""
    import paddle

    warmup = max(1, round(args.warmup * per_epoch[0]))
    total = sum(per_epoch)
    if args.time_budget != "none" or total <= warmup:
        return paddle.optimizer.lr.LinearWarmup(lr, warmup, start_lr=0.0, end_lr=lr)
    decay = paddle.optimizer.lr.PolynomialDecay(lr, decay_steps=total - warmup, end_lr=0.0)
    return paddle.optimizer.lr.LinearWarmup(decay, warmup, start_lr=0.0, end_lr=lr)


def random_step(model: Any, optimizer: Any, meta: dict[str, Any], seed: int) -> Any:
    """``step(n, L)``: one training step on random ids, for calibration and preflight."""
    import paddle

    rng = np.random.default_rng(seed)

    def step(n: int, length: int) -> None:
        ids = paddle.to_tensor(rng.integers(5, meta["vocab_size"], size=(n, length)))
        labels = paddle.to_tensor(rng.integers(0, meta["num_labels"], size=n), dtype="int64")
        loss = paddle.nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()

    return step


def recipe_sampler(
    args: argparse.Namespace, lengths: Any, packed: bool, dataset: Any = None
) -> Any:
    """The ``dynamic`` mode's sampler, the default recipe told ``--batch-size``; ``packed``: the
    ``pack`` mode's, rows of ``--max-len``. Made from the lengths alone, it checks the plan:
    the parent makes the pack mode's before any mode trains, so a refusal comes first."""
    import dynbatch

    return dynbatch.DynamicBatchSampler(
        dataset,
        lengths=lengths,
        batch_size=args.batch_size,
        seed=args.seed,
        pack_len=args.max_len if packed else None,
    )


def pack_collate(meta: dict[str, Any], pack_len: int) -> Any:
    """The collate of the ``pack`` mode: one micro-batch's reviews as packed rows.

    It returns ``(input_ids, token_type_ids, position_ids, mask, cls, labels, index)``: the
    rows of :class:`dynbatch.PackCollator` (``[R, P]``), BERT's additive block-diagonal mask
    ``[R, 1, P, P]``, ``cls`` ``[S, 2]`` the (row, column) of each review's ``[CLS]``, and
    each review's label and index, in the order of ``cls`` (NOTE [ a packed classifier ]).
    """
    import dynbatch
    from dynbatch.paddle.pack_collate import additive_mask

    packer = dynbatch.PackCollator(
        pack_len, causal=False, pad_val=meta["pad_id"], return_startend=False
    )

    def collate(samples: list[tuple[np.ndarray, Any, Any]]) -> tuple[np.ndarray, ...]:
        rows = packer([{"input_ids": ids} for ids, _, _ in samples])
        starts = rows["sample_starts"]
        r, k = np.nonzero(starts >= 0)  # row by row: the reviews in the order given
        return (
            rows["input_ids"],
            rows["token_type_ids"],
            rows["position_ids"],
            additive_mask(rows["attention_mask"]),
            np.stack([r, starts[r, k]], axis=1),
            np.asarray([s[1] for s in samples], dtype=np.int64),
            np.asarray([s[2] for s in samples], dtype=np.int64),
        )

    return collate


def packed_logits(model: Any, batch: Any) -> Any:
    """The logits ``[S, num_labels]`` of the reviews packed in ``batch`` (:func:`pack_collate`).

    NOTE [ a packed classifier ]
        ``BertForSequenceClassification`` pools the first token of each row, so on packed
        rows its own forward would classify one review a row. The ``pack`` mode runs its
        ``bert`` on the rows with the block-diagonal additive mask and the positions
        restarting at 0 at each review (each review attends only to itself and sees its own
        absolute positions: the tokens it would see alone), gathers each review's ``[CLS]``
        hidden state, applies the model's own pooler to them (``BertPooler`` takes
        ``[S, T, H]`` and pools ``[:, 0]``), then its dropout and classifier: the same
        weights, the same logits as each review alone. The collator keeps the reviews in the
        order given (next-fit rows), so the ``[CLS]`` found row by row are the reviews in
        order and the labels follow them. The loss is summed over the reviews and the
        accumulator divides by the update's reviews: the exact mean over the update.
    """
    import paddle

    ids, types, positions, mask, cls = batch[:5]
    seq = model.bert(
        ids, token_type_ids=types, position_ids=positions, attention_mask=mask, return_dict=False
    )[0]
    pooled = model.bert.pooler(paddle.gather_nd(seq, cls).unsqueeze(1))
    return model.classifier(model.dropout(pooled))


def evaluate(model: Any, ds: TokenIds, collate: Any, max_len: int) -> float:
    import paddle

    import dynbatch

    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=64 * max_len, cost="linear", order="ascending"
    )
    loader = paddle.io.DataLoader(ds, batch_sampler=sampler, collate_fn=collate)
    model.eval()
    correct = 0
    with paddle.no_grad():
        for ids, labels, _ in loader:
            correct += int((model(ids).argmax(axis=-1) == labels).astype("int64").sum())
    model.train()
    return correct / len(ds)


def plan_options(args: argparse.Namespace, mode: str, cost: Any = None, target: Any = None) -> Any:
    """The dynbatch options of a dynamic mode, from the example's flags."""
    import dynbatch

    options = dynbatch.PlanOptions.from_args(
        args,
        max_cost=args.max_cost if target is None else target,
        order="bucket" if mode == "calibrated" else mode,
        oversize="alone",  # a review longer than the budget alone still trains, alone
    )
    return options if cost is None else options.replace(cost=cost)


def table_fill_options(args: argparse.Namespace, train: TokenIds) -> tuple[Any, dict[str, Any]]:
    """``fill`` planned for the device whose step times --time-table holds, not for this CPU.

    The knee is the table's fitted step time at --fill of the best tokens/s; the memory bound
    is the table's largest measured batch in tokens (``n * L``, linear cost): the plan that
    device would train, trained here.
    """
    import dynbatch

    table = dynbatch.StepTimeTable.load(args.time_table)
    largest = float((table.n * table.lengths).max())
    options = dynbatch.fill_device(
        train.lengths,
        table.fit(),
        max_cost=largest,
        cost="linear",
        fraction=args.fill,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    return options, {"time_table": str(args.time_table), "fill_max_cost": largest}


def calibrated_options(
    args: argparse.Namespace, model: Any, meta: dict[str, Any], train: TokenIds, work: Path
) -> tuple[Any, dict[str, Any]]:
    """Calibrate the model's memory, take the target, check the heaviest batches first.

    ``calibrated``: bucket batches as large as the target allows; ``fill``: batches at the
    knee of the fitted step time (``--fill`` of the best tokens/s), within the target.
    """
    import dynbatch

    fixed = work / "fixed.json"
    target = args.memory_target
    if target is None and fixed.exists():
        target = json.loads(fixed.read_text())["peak_memory_mb"]
    if target is None:
        raise SystemExit(
            "error: mode calibrated needs a memory target: run the fixed mode first (its "
            "worst-batch peak is the target) or pass --memory-target MIB"
        )
    # a throwaway optimizer of the same kind: dynbatch.calibrate's NOTE [ restoring state ]
    probe = make_optimizer(model, 1e-9)
    step = random_step(model, probe, meta, args.seed)
    start = time.perf_counter()
    cost = dynbatch.calibrate(step, max_len=args.max_len, restore=[model])
    calibration_s = time.perf_counter() - start
    cost.save(work / "calib.json")
    if args.worker == "fill":
        options = dynbatch.fill_device(
            train.lengths,
            cost.time_model,
            max_cost=target,
            cost=cost,
            fraction=args.fill,
            batch_size=args.batch_size,
            seed=args.seed,
        )
    else:
        options = plan_options(args, "calibrated", cost=cost, target=target)
    plan = dynbatch.plan_batches(train.lengths, options=options)
    report = dynbatch.preflight(
        step, plan, train.lengths, cost=cost, max_cost=1.05 * target, k=3, restore=[model]
    )
    del probe, step
    gc.collect()
    print(f"calibrated in {calibration_s:.1f} s: {cost.spec()}\n{report}", flush=True)
    return options, {"calibration_s": calibration_s, "target_mb": target}


def run_mode(args: argparse.Namespace) -> int:
    import paddle

    import dynbatch
    from dynbatch.memory import peak_memory_mib
    from dynbatch.plan.windows import optimizer_steps

    mode = args.worker
    out = Path(args.output_dir)
    work = out / "work"
    meta = json.loads((work / "meta.json").read_text())
    data = np.load(work / "data.npz")
    train, dev = TokenIds(data, "train"), TokenIds(data, "dev")
    collate = dynbatch.Tuple(
        dynbatch.Pad(pad_val=meta["pad_id"]), dynbatch.Stack(), dynbatch.Stack()
    )
    packed = mode == "pack"

    paddle.seed(args.seed)
    np.random.seed(args.seed)
    model = build_model(meta, args.recompute)
    extra: dict[str, Any] = {}
    if mode == "fixed":
        sampler: Any = paddle.io.BatchSampler(train, shuffle=True, batch_size=args.batch_size)
    elif mode == "group":
        sampler = LengthGroupedBatchSampler(train.lengths, args.batch_size, args.seed)
    elif mode in ("dynamic", "pack"):  # the default recipe: say the batch you would have used
        sampler = recipe_sampler(args, train.lengths, packed, train)
    else:
        if mode == "fill" and args.time_table:
            options, extra = table_fill_options(args, train)
        elif mode in CALIBRATED:
            options, extra = calibrated_options(args, model, meta, train, work)
        else:
            options = plan_options(args, mode)
        sampler = dynbatch.DynamicBatchSampler(train, lengths=train.lengths, options=options)
    dynamic = mode not in FIXED_SIZE  # a dynbatch sampler: its plan, its updates
    loader = paddle.io.DataLoader(
        train,
        batch_sampler=sampler,
        num_workers=args.num_workers,
        collate_fn=pack_collate(meta, args.max_len) if packed else collate,
    )
    lr = args.lr or (1e-3 if meta["model"] == "tiny" else 5e-5)
    planned = dynamic and sampler.options.update_size is not None  # the plan makes updates
    target = None if planned else args.accumulate_tokens
    if dynamic:  # optimizer steps of each epoch, from the plan, before any optimizer exists
        per_epoch = [
            optimizer_steps(sampler.epoch_plan(e), train.lengths, target, "tokens")
            for e in range(args.epochs)
        ]
        if args.lr_scaling != "none":  # fill included: its updates are larger than the batch
            mean_batch = len(train) / per_epoch[0]  # samples per optimizer step
            lr = dynbatch.scale_lr(lr, mean_batch, args.batch_size, rule=args.lr_scaling)
    else:
        per_epoch = [len(sampler)] * args.epochs
    schedule = make_schedule(lr, per_epoch, args)
    opt = make_optimizer(model, schedule)
    scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15) if args.amp else None
    acc = dynbatch.GradientAccumulator(
        model,
        opt,
        sampler=sampler if dynamic else None,
        target=target if dynamic else None,
        unit=None if planned else "tokens",
        scaler=scaler,
        lr_scheduler=schedule,
    )
    hook = dynbatch.VisualDLHook(
        str(out / "vdl" / mode), sampler if dynamic else None, optimizer=opt
    )
    budget = None
    if dynamic and args.time_budget == "auto" and (work / "fixed.json").exists():
        budget = json.loads((work / "fixed.json").read_text())["wall_s"]
    elif args.time_budget not in ("auto", "none"):
        budget = float(args.time_budget)
    history: dict[str, list[float]] = {"time": [], "loss": [], "batch_size": [], "memory": []}
    # an optimizer update's samples, and when it ended: what the curves compare between modes
    history |= {"update_time": [], "update_size": []}
    pending = 0  # samples of the update still open
    trained: list[np.ndarray] = []
    first_epoch: list[int] = []
    same_data: float | None = None
    by_epoch: list[float] = []  # dev accuracy after each whole epoch
    reached: int | None = None  # the first epoch whose dev accuracy is --target-accuracy's
    train_seconds = 0.0
    slots = 0  # token slots trained: padded micro-batches, or packed rows of --max-len
    epoch = finished = 0  # epochs begun, epochs run to their end
    stop = whole = False
    # the mode's micro-batches on a bar (a terminal's stderr only), the epoch's running loss
    bar = progress(None if budget else len(loader) * args.epochs, mode)
    while not stop:
        hook.on_epoch_begin(epoch)
        if mode == "fixed":
            np.random.seed([args.seed, epoch])
        elif mode == "group":
            sampler.set_epoch(epoch)
        if bar.total is not None:  # a dynamic plan's epochs may differ by a micro-batch
            bar.total = bar.n + len(loader) * (args.epochs - epoch)
        label = f"{epoch + 1}/{args.epochs}" if budget is None else f"{epoch + 1}"
        loss_sum_epoch, reviews_epoch = 0.0, 0
        whole = False
        for step, batch in enumerate(loader):
            start = time.perf_counter()
            hook.on_train_batch_begin(step)  # resets the allocator's peak
            ids, labels, index = batch[0], batch[-2], batch[-1]
            n = int(labels.shape[0])  # the micro-batch's reviews (packed: fewer rows)
            with acc.accumulate():  # no_sync on multi-card unless this micro-batch ends a step
                with paddle.amp.auto_cast(enable=args.amp):
                    logits = packed_logits(model, batch) if packed else model(ids)
                losses = paddle.nn.functional.cross_entropy(
                    logits.astype("float32"), labels, reduction="none"
                )
                loss_sum = losses.sum()  # a sum: the accumulator divides by the step's count
                acc.backward(loss_sum, count=n)
            peak = peak_memory_mib()
            train_seconds += time.perf_counter() - start
            idx = index.numpy()
            trained.append(idx)
            slots += int(ids.shape[0]) * int(ids.shape[1])
            if epoch == 0:
                first_epoch.extend(idx.tolist())
            mean_loss = float(loss_sum) / n
            loss_sum_epoch, reviews_epoch = loss_sum_epoch + float(loss_sum), reviews_epoch + n
            bar.set_postfix(
                {"epoch": label, "loss": f"{loss_sum_epoch / reviews_epoch:.4f}"}, refresh=False
            )
            bar.update(1)
            history["time"].append(train_seconds)
            history["loss"].append(mean_loss)
            history["batch_size"].append(float(n))
            history["memory"].append(peak)
            pending += n
            hook.on_train_batch_end(step, {"loss": mean_loss, "batch_size": n})
            done = acc.optimizer_steps + acc.skipped_steps
            if done > len(history["update_size"]):  # this micro-batch ended an update
                history["update_time"].append(train_seconds)
                history["update_size"].append(float(pending))
                pending = 0
            if (args.max_steps and done >= args.max_steps) or (budget and train_seconds >= budget):
                stop = True
                break
        else:
            finished += 1
            whole = True
        hook.on_epoch_end(epoch)
        epoch += 1
        trained_loss = (
            f"training loss {loss_sum_epoch / reviews_epoch:.4f} (the mean over its "
            f"{reviews_epoch} reviews)"
            if reviews_epoch
            else "no review trained"
        )
        if whole:  # the dev accuracy of every whole epoch, off the clock
            by_epoch.append(evaluate(model, dev, collate, args.max_len))
            bar.unpause()  # the bar's time and rate are training's, as wall_s
            say(f"{mode}: epoch {label}: {trained_loss}, dev accuracy {by_epoch[-1]:.4f}")
            goal = args.target_accuracy
            if reached is None and goal is not None and by_epoch[-1] >= goal:
                reached, stop = epoch, True  # time to accuracy: --epochs was the cap
        else:
            steps = acc.optimizer_steps
            say(f"{mode}: stopped in epoch {label} after {steps} optimizer steps: {trained_loss}")
        if epoch == args.epochs:
            if budget is None or stop:
                stop = True
            else:  # as many samples as the fixed mode has seen
                same_data = by_epoch[-1]
    bar.close()
    hook.close()
    stats = dynbatch.plan_stats(train.lengths, trained, cost="linear")
    dev_accuracy = by_epoch[-1] if whole else evaluate(model, dev, collate, args.max_len)
    memory = np.asarray(history["memory"])
    result = {
        "mode": mode,
        "wall_s": train_seconds,
        "steps": acc.optimizer_steps,
        "micro_batches": len(history["batch_size"]),
        "epochs": stats.samples / len(train),
        "samples_per_sec": stats.samples / train_seconds,
        "real_tokens_per_sec": stats.real_tokens / train_seconds,
        # real tokens over the token slots trained (packed: rows x --max-len)
        "padding_efficiency": stats.real_tokens / slots if packed else stats.padding_efficiency,
        "peak_memory_mb": float(memory.max()),
        "median_memory_mb": float(np.median(memory)),
        "memory_max_over_median": float(memory.max() / np.median(memory)),
        "dev_accuracy": dev_accuracy,
        "dev_accuracy_same_data": dev_accuracy if same_data is None else same_data,
        "skipped_steps": acc.skipped_steps,
        # the first epoch: no sample twice, and every sample if it was finished (a mode
        # slower than the fixed one may not finish it within the fixed mode's time)
        "every_sample_once": len(set(first_epoch)) == len(first_epoch)
        and (finished == 0 or sorted(first_epoch) == list(range(len(train)))),
        "lr": lr,
        "dev_accuracy_by_epoch": by_epoch,
        "target_accuracy": args.target_accuracy,
        "epochs_to_target": reached,
        "history": history,
        **extra,
    }
    (work / f"{mode}.json").write_text(json.dumps(result))
    print(
        f"{mode}: {result['wall_s']:.1f} s, {result['epochs']:.2f} epochs, "
        f"{result['real_tokens_per_sec']:.0f} real tokens/s, peak {result['peak_memory_mb']:.0f} "
        f"MiB (median {result['median_memory_mb']:.0f}), dev accuracy {dev_accuracy:.4f}",
        flush=True,
    )
    return 0
