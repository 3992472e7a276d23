"""The training of one mode of ``sft_causal_lm.py``, in a process of its own.

A process of its own gives the mode its own wall time and its own allocator peak. The
runners share the data (:class:`Pairs`), the model (:func:`build_model`), the calibrated
memory cost (:func:`memory_cost`) and the evaluation (:func:`evaluate`), so the modes and
runners differ only in how they batch and update. ``--runner trainer`` and ``--runner
paddleformers`` are one runner, :func:`train_trainer`, given its framework
(NOTE [ one Trainer runner, two hosts ] in ``sft_hosts.py``).

NOTE [ paddlenlp's labels are already shifted ]
    paddlenlp's causal LMs do not shift: ``Qwen2PretrainingCriterion`` compares the logits at
    ``t`` with the label at ``t``, and paddlenlp's own SFT data makes ``labels`` the ids moved
    left by one. PaddleFormers' ``LlamaForCausalLM`` does the same (its ``CriterionLayer``'s
    SFT loss). dynbatch's ``token_loss`` shifts (as HF's models do), so the pairs keep their
    labels lined up with the ids, and only the stock Trainer's batches (the model's own loss)
    get labels moved left by one with -100 at the end: the same tokens carry the same loss.

NOTE [ packed pairs ]
    The ``pack`` mode packs each micro-batch's pairs into rows of ``--max-len`` tokens with
    :class:`dynbatch.PackCollator` (``causal=True``) and runs the model with its
    ``position_ids`` (restarting at 0 at each pair) and its bool ``[R, P, P]`` block-diagonal
    causal mask, which paddlenlp's Qwen2 uses as given: each pair attends only to itself and
    sees the positions it would see alone (NOTE [ one sample, alone in its row ] in
    :mod:`dynbatch.paddle.pack_collate`). The labels stay lined up with the ids, as the
    unpacked modes' (``shift=True``): ``token_loss`` shifts along the whole row, so the logits
    at a pair's last token (its ``</s>``) would predict the next pair's first label. The
    collator makes that label -100 (here it is ``<s>``'s, a prompt label, -100 already), and
    -100 on the fill: the loss tokens of a row are exactly its pairs' answers and end tokens,
    each predicted from its own pair. The sampler is the dynamic mode's with
    ``pack_len=--max-len`` (the same ``batch_size`` and ``loss_tokens``, its cost and budget
    as NOTE [ the pack mode's budget ] says), so the updates are random draws of ``B`` pairs
    and each is still the per-token mean over its loss tokens: the accumulator adds the sums
    and counts of its micro-batches, whatever their shape. Evaluation is unpacked, the same
    function for every mode. ``--runner trainer`` gives the dynamic mode's
    ``DynamicBatchTrainer`` the same plan as ``options=like_fixed(...)``: its collator makes
    the same rows of the same ``(input_ids, labels)`` (NOTE [ the Trainer packs ] in
    :mod:`dynbatch.integrations.core.packing`), and with a step time (``--time-model``) each
    micro-batch runs packed or padded, as its plan priced it.

NOTE [ the pack mode's budget ]
    A packed row does not cost what a padded pair of its width costs: the model takes its
    positions and its ``[R, P, P]`` block mask, and builds its attention from that mask. A cost
    calibrated on padded steps priced a micro-batch of ``R`` rows as ``R`` pairs, and the pack
    mode peaked over the fixed batch's worst. So the pack mode calibrates its own layout,
    probes of ``n`` rows of one pair each with their positions and mask (a dense row costs its
    width, whatever it holds), and keeps the padded calibration for what runs padded: the
    budget, the fixed batch's worst as it runs (``B`` pairs of the longest, or all of them
    where fewer), and, with a step time, a micro-batch the plan runs padded. ``like_fixed(...,
    cost=<the padded>, rows_cost=<the rows'>)``: the dynamic mode's budget, each layout priced
    as it runs (NOTE [ a cost per layout ] in :mod:`dynbatch.plan.packs.attention`); priced by
    the rows' cost alone, a padded update was over the budget it set, and no update ran whole.
    A row of ``--max-len`` over the budget (``--batch-size 1``: one pair with a mask costs more
    than one without) is refused before any mode trains, naming those flags. The Trainer takes
    that plan as ``options=``: it measures a step time for its own recipe only, so with
    ``--time-model measure`` (``auto`` on an accelerator) the pack mode plans with the step
    time the calibration fitted on the rows' probes.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import UsageError, progress, say
from sft_hosts import HOSTS, TINY, TrainerHost

IGNORE = -100
EVAL_BATCH = 32
WARMUP = 0.1  # of the first epoch's updates


class Pairs:
    """``(input_ids, labels)`` of one split of the arrays ``sft_causal_lm.prepare`` wrote."""

    def __init__(self, data: Any, split: str) -> None:
        self.ids = data[f"{split}_ids"]
        self.labels = data[f"{split}_labels"]
        self.offsets = data[f"{split}_offsets"]
        self.lengths = np.diff(self.offsets)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.ids[a:b], self.labels[a:b]

    def __len__(self) -> int:
        return int(self.lengths.size)


def build_model(meta: dict[str, Any], max_len: int, runner: str = "loop") -> Any:
    """The tiny causal LM of ``runner``'s framework (paddlenlp's Qwen2, PaddleFormers' Llama)."""
    return HOSTS[runner].build_model(meta, max_len)


def logits_of(outputs: Any) -> Any:
    """paddlenlp returns a tuple (logits first) or, with return_dict, an output object."""
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs.logits


def make_optimizer(model: Any, lr: Any) -> Any:
    import paddle

    return paddle.optimizer.AdamW(
        lr,
        parameters=model.parameters(),
        weight_decay=0.01,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )


def make_schedule(lr: float, first_epoch: int, total: int) -> Any:
    """Linear warm-up over a tenth of the first epoch's updates, then linear decay to 0 at the
    run's last update (known before training, for both modes)."""
    import paddle

    warmup = warmup_steps(first_epoch, total)
    decay = paddle.optimizer.lr.PolynomialDecay(lr, decay_steps=total - warmup, end_lr=0.0)
    return (
        paddle.optimizer.lr.LinearWarmup(decay, warmup, start_lr=0.0, end_lr=lr)
        if warmup
        else decay
    )


def warmup_steps(first_epoch: int, total: int) -> int:
    """A tenth of the first epoch's updates, and none for a run too short to warm up (a
    warm-up starts at learning rate 0: a run of one update would train nothing)."""
    warmup = round(WARMUP * first_epoch)
    return warmup if total > 2 * warmup else 0


def collate_pairs(samples: list[tuple[np.ndarray, np.ndarray]], pad_id: int) -> tuple[Any, Any]:
    """Right-padded ids (``pad_id``) and labels (-100): a causal mask keeps the padding, which
    comes after every real token, out of their attention."""
    import dynbatch

    ids = dynbatch.Pad(pad_val=pad_id, dtype="int64")([s[0] for s in samples])
    labels = dynbatch.Pad(pad_val=IGNORE, dtype="int64")([s[1] for s in samples])
    return ids, labels


def pack_pairs(pack_len: int, pad_id: int) -> Any:
    """The collate of the ``pack`` mode: ``(input_ids, labels, position_ids, attention_mask)``,
    one micro-batch's pairs as rows of ``pack_len`` tokens (NOTE [ packed pairs ])."""
    import dynbatch

    packer = dynbatch.PackCollator(pack_len, causal=True, pad_val=pad_id, return_startend=False)

    def collate(samples: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
        rows = packer([{"input_ids": ids, "labels": labels} for ids, labels in samples])
        return tuple(rows[k] for k in ("input_ids", "labels", "position_ids", "attention_mask"))

    return collate


def forward(model: Any, batch: Any) -> Any:
    """The logits of a micro-batch: padded ``(ids, labels)``, or packed rows
    (:func:`pack_pairs`) with their positions and block-diagonal mask."""
    if len(batch) == 2:
        return logits_of(model(input_ids=batch[0]))
    ids, _, positions, mask = batch
    return logits_of(model(input_ids=ids, position_ids=positions, attention_mask=mask))


def evaluate(model: Any, ds: Pairs, pad_id: int) -> tuple[float, float]:
    """The per-token mean cross entropy over the held-out pairs' loss tokens, and the share of
    pairs whose every loss token is the argmax (teacher-forced). The same for every mode."""
    import paddle

    import dynbatch

    order = np.argsort(ds.lengths, kind="stable")
    loss_sum, count, right = 0.0, 0, 0
    model.eval()
    with paddle.no_grad():
        for start in range(0, len(order), EVAL_BATCH):
            ids, labels = collate_pairs([ds[i] for i in order[start : start + EVAL_BATCH]], pad_id)
            ids, labels = paddle.to_tensor(ids), paddle.to_tensor(labels)
            logits = logits_of(model(input_ids=ids))
            s, c = dynbatch.token_loss(logits, labels)
            loss_sum, count = loss_sum + float(s), count + int(c)
            target = labels[:, 1:]
            wrong = (logits[:, :-1].argmax(axis=-1) != target) & (target != IGNORE)
            right += int((~wrong.any(axis=1)).astype("int64").sum())
    model.train()
    return loss_sum / count, right / len(ds)


def memory_cost(
    args: argparse.Namespace,
    model: Any,
    meta: dict[str, Any],
    train: Pairs,
    out: Path,
    packed: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """A :class:`dynbatch.MemoryCost` of this model's training step, from the cache in the
    output directory or calibrated now (and cached): once per model, length, layout and
    hardware.

    The probes are steps like training's: random ids whose last tokens (as many as a pair's
    answer and end) carry the loss, since ``token_loss`` computes only the rows with a loss.
    ``packed``: the steps run the pack mode's layout, ``n`` rows of one pair of ``L`` tokens
    with their positions and block mask (:func:`pack_pairs`), a dense row's cost whatever it
    holds (NOTE [ the pack mode's budget ]).
    """
    max_len = int(train.lengths.max())
    answer = int(max(np.count_nonzero(train[i][1] != IGNORE) for i in range(len(train))))
    import paddle

    import dynbatch

    dims = "-".join(f"{v}" for v in TINY.values())
    family = HOSTS[args.runner].model.lower()
    layout = "-packed" if packed else ""
    name = f"calib-{family}-{dims}-v{meta['vocab_size']}-L{max_len}-B{args.batch_size}{layout}"
    path = out / f"{name}.json"
    cost = None
    if path.is_file():
        try:
            cost = dynbatch.MemoryCost.load(path)
        except dynbatch.InputError as exc:  # cut short or edited: measure again
            print(f"calibrating again: {exc}", flush=True)
    if cost is not None:
        report = cost.report
        if report is not None and report.device == str(paddle.device.get_device()):
            print(f"memory cost from {path}: {cost.spec()}", flush=True)
            return cost, {"calibration_s": 0.0, "calibration_cached": True}
    rng = np.random.default_rng(args.seed)
    probe = make_optimizer(model, 1e-9)  # same kind, throwaway: NOTE [ restoring state ]

    def step(n: int, length: int) -> None:  # one training step of the loop on random pairs
        ids = rng.integers(meta["eos_id"] + 1, meta["vocab_size"], (n, length))
        labels = ids.copy()
        labels[:, : max(1, length - answer)] = IGNORE  # the prompt
        pairs = list(zip(ids, labels, strict=True))
        arrays = pack_pairs(length, meta["pad_id"])(pairs) if packed else (ids, labels)
        batch = [paddle.to_tensor(a) for a in arrays]
        loss_sum, count = dynbatch.token_loss(forward(model, batch), batch[1])
        (loss_sum / count.astype("float32").clip(min=1)).backward()
        probe.step()
        probe.clear_grad()

    start = time.perf_counter()
    cost = dynbatch.calibrate(
        step, max_len=max_len, max_batch_size=args.batch_size, restore=[model]
    )
    model.clear_gradients(set_to_zero=False)  # the probes' gradients, not training's peak
    seconds = time.perf_counter() - start
    cost.save(path)  # the probe optimizer goes with this frame: gc before training's peak
    print(f"calibrated in {seconds:.1f} s: {cost.spec()}\n{cost.report}", flush=True)
    return cost, {
        "calibration_s": seconds,
        "calibration_cached": False,
        "calibration_held_out_error": cost.report.held_out_error,
    }


def pack_cost(
    args: argparse.Namespace, model: Any, meta: dict[str, Any], train: Pairs, out: Path
) -> tuple[Any, Any, dict[str, Any]]:
    """The pack mode's costs, padded and of its rows, and both calibrations' record, each
    layout's under its name (NOTE [ the pack mode's budget ])."""
    padded, padded_record = memory_cost(args, model, meta, train, out)
    rows, rows_record = memory_cost(args, model, meta, train, out, packed=True)
    extra = {
        "calibration_s": padded_record["calibration_s"] + rows_record["calibration_s"],
        "calibration_cached": padded_record["calibration_cached"]
        and rows_record["calibration_cached"],
        "calibrations": {"padded": padded_record, "packed": rows_record},
    }
    return padded, rows, extra


def pack_options(
    args: argparse.Namespace, train: Pairs, padded: Any, rows: Any, time_model: Any = None
) -> Any:
    """The pack mode's plan: rows of ``--max-len`` tokens priced by their own calibration,
    padded micro-batches by the padded one, under the fixed batch's worst as it runs, padded
    (NOTE [ the pack mode's budget ]); a row over that is refused naming the flags."""
    import dynbatch

    longest = int(train.lengths.max())
    worst = float(padded(min(args.batch_size, len(train)), longest))
    one_row = float(rows(1, args.max_len))
    if one_row > worst:
        raise UsageError(
            f"mode pack: one row of --max-len {args.max_len} tokens needs {one_row:.2f} MiB "
            f"(its positions and mask), over the fixed batch's worst, --batch-size "
            f"{args.batch_size} pairs of the longest ({longest} tokens) padded: {worst:.2f} MiB; "
            "raise --batch-size (a pair in a row costs more than the pair padded, at any "
            "--max-len)"
        )
    return dynbatch.like_fixed(
        train.lengths,
        args.batch_size,
        cost=padded,
        rows_cost=rows,
        update_unit="samples",  # NOTE [ updates in samples, not tokens ]
        seed=args.seed,
        time_model=time_model,
        pack_len=args.max_len,  # NOTE [ packed pairs ]
    )


def loss_tokens_of(train: Pairs) -> Any:
    import dynbatch

    return dynbatch.loss_token_counts([train[i][1] for i in range(len(train))])


def make_sampler(args: argparse.Namespace, train: Pairs, cost: Any, rows: Any = None) -> Any:
    """The dynamic mode's sampler (with ``rows``, the packed rows' cost, the ``pack`` mode's):
    the fixed batch told, with the pairs' loss tokens, under the calibrated ``cost``."""
    import dynbatch

    if rows is not None:
        options = pack_options(args, train, cost, rows)
        return dynbatch.DynamicBatchSampler(
            train, lengths=train.lengths, loss_tokens=loss_tokens_of(train), options=options
        )
    return dynbatch.DynamicBatchSampler(
        train,
        lengths=train.lengths,
        loss_tokens=loss_tokens_of(train),
        batch_size=args.batch_size,
        cost=cost,
        update_unit="samples",  # NOTE [ updates in samples, not tokens ]
        seed=args.seed,
    )


def packed_step_time(step_time: str, cost: Any) -> Any:
    """The pack mode's step time from ``--time-model``: ``none`` none, ``c,a,b`` as given, and
    ``measure`` (``auto`` on an accelerator) the one its calibration fitted on the packed
    rows' probes, the layout's own (the Trainer measures only for its own recipe)."""
    import paddle

    import dynbatch

    if step_time == "none" or (step_time == "auto" and paddle.device.get_device() == "cpu"):
        return None
    if step_time in ("auto", "measure"):
        return cost.time_model
    return dynbatch.StepTimeModel.parse(step_time, "--time-model")


def updates(first: int, last: int) -> str:
    """``"updates 3-5"``, or ``"update 3"``."""
    return f"updates {first}-{last}" if last > first else f"update {first}"


class TrainingLoss:
    """The training loss as it falls: the per-token mean over the loss tokens (each answer and
    its end token) of the updates since the last line, a line at each quarter of an epoch.

    >>> seen = TrainingLoss("fixed", total=8, per_epoch=8, say=print)
    >>> seen.epoch("1/1")
    >>> for update in range(1, 5):
    ...     seen.add(loss_sum=6.0 / update, count=3, done=update)
    fixed: updates 1-2 of 8 (epoch 1/1): training loss 1.5000 per loss token
    fixed: updates 3-4 of 8 (epoch 1/1): training loss 0.4167 per loss token
    """

    def __init__(self, mode: str, total: int, per_epoch: int, say: Any = say) -> None:
        self.mode, self.total, self.per_epoch, self.say = mode, total, per_epoch, say
        self.loss_sum, self.count = 0.0, 0
        self.done = 0  # updates finished
        self.first = 1  # the first update of the next line
        self.label = ""
        self.marks: list[int] = []

    def epoch(self, label: str) -> None:
        """An epoch begins: its lines end at its quarters (in updates)."""
        self.label = label
        self.marks = sorted(
            {self.done + max(1, round(q * self.per_epoch / 4)) for q in range(1, 5)}
        )

    def add(self, loss_sum: float, count: int, done: int) -> None:
        """A micro-batch's summed token loss and loss tokens; ``done`` updates are finished."""
        self.loss_sum, self.count, self.done = self.loss_sum + loss_sum, self.count + count, done
        if self.marks and done >= self.marks[0]:
            self.marks = [m for m in self.marks if m > done]
            self.flush()

    def shown(self) -> str:
        return f"{self.loss_sum / self.count:.4f}" if self.count else "-"

    def flush(self) -> None:
        """Print the line of the updates finished since the last one, if any."""
        if self.count and self.done >= self.first:
            self.say(
                f"{self.mode}: {updates(self.first, self.done)} of {self.total} (epoch "
                f"{self.label}): training loss {self.shown()} per loss token"
            )
            self.loss_sum, self.count, self.first = 0.0, 0, self.done + 1


def train_loop(
    args: argparse.Namespace, model: Any, train: Pairs, meta: dict[str, Any], out: Path
) -> dict[str, Any]:
    """The hand-written loop: ``token_loss`` and ``GradientAccumulator`` for every mode."""
    import functools

    import paddle

    import dynbatch
    from dynbatch.memory import peak_memory_mib, reset_peak_memory

    mode, epochs = args.worker, args.epochs
    packed = mode == "pack"
    collate = (
        pack_pairs(args.max_len, meta["pad_id"])
        if packed
        else functools.partial(collate_pairs, pad_id=meta["pad_id"])
    )
    extra: dict[str, Any] = {}
    sampler: Any = None
    if mode == "fixed":
        loader = paddle.io.DataLoader(
            train, batch_size=args.batch_size, shuffle=True, collate_fn=collate
        )
        first, total = len(loader), len(loader) * epochs
    else:
        if packed:
            cost, rows, extra = pack_cost(args, model, meta, train, out)
        else:
            (cost, extra), rows = memory_cost(args, model, meta, train, out), None
        sampler = make_sampler(args, train, cost, rows)
        loader = paddle.io.DataLoader(train, batch_sampler=sampler, collate_fn=collate)
        first, total = sampler.steps_for_epochs([0]), sampler.steps_for_epochs(range(epochs))
        extra["max_cost_mb"] = float(sampler.max_cost)
    schedule = make_schedule(args.lr, first, total)
    optimizer = make_optimizer(model, schedule)
    acc = dynbatch.GradientAccumulator(model, optimizer, sampler=sampler, lr_scheduler=schedule)
    real = padded = micro_batches = pairs = 0
    losses = TrainingLoss(mode, total, first)  # a line each quarter of an epoch
    bar = progress(len(loader) * epochs, mode)  # a terminal's stderr only
    gc.collect()
    reset_peak_memory()
    start = time.perf_counter()
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        else:
            np.random.seed([args.seed, epoch])  # paddle's RandomSampler draws from numpy
        bar.total = bar.n + len(loader) * (epochs - epoch)  # a plan's epochs may differ by one
        losses.epoch(f"{epoch + 1}/{epochs}")
        for batch in loader:
            ids, labels = batch[0], batch[1]
            with acc.accumulate():
                loss_sum, count = dynbatch.token_loss(forward(model, batch), labels)
                acc.backward(loss_sum, count=count)  # the update: sum over count, every token
            tokens = ids.numpy()
            real += int((tokens != meta["pad_id"]).sum())
            padded += int(ids.shape[0] * ids.shape[1])
            pairs += int((tokens == meta["bos_id"]).sum())  # each pair's one <s>
            micro_batches += 1
            losses.add(float(loss_sum), int(count), acc.optimizer_steps + acc.skipped_steps)
            bar.set_postfix(
                {"epoch": f"{epoch + 1}/{epochs}", "loss": losses.shown()}, refresh=False
            )
            bar.update(1)
        losses.flush()  # the epoch's last updates
    bar.close()
    wall = time.perf_counter() - start
    return {
        "wall_seconds": wall,
        "peak_memory_mb": peak_memory_mib(),
        "steps": acc.optimizer_steps,
        "planned_steps": total,
        "skipped_steps": acc.skipped_steps,
        "micro_batches": micro_batches,
        "real_tokens": real,
        "padded_tokens": padded,
        "pairs_trained": pairs,
        "lr_at_end": float(optimizer.get_lr()),
        **extra,
    }


class Records:
    """The Trainer's samples, ``{"input_ids", "labels"}``, over :class:`Pairs`."""

    def __init__(self, pairs: Pairs) -> None:
        self.pairs, self.lengths = pairs, pairs.lengths

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        ids, labels = self.pairs[i]
        return {"input_ids": ids, "labels": labels}

    def __len__(self) -> int:
        return len(self.pairs)


def collate_records(
    samples: list[dict[str, np.ndarray]], pad_id: int, shift: bool
) -> dict[str, np.ndarray]:
    """Padded ids and labels; ``shift``: labels moved left by one, for a paddlenlp model's own
    loss (NOTE [ paddlenlp's labels are already shifted ])."""
    ids, labels = collate_pairs([(s["input_ids"], s["labels"]) for s in samples], pad_id)
    if shift:
        labels = np.concatenate([labels[:, 1:], np.full_like(labels[:, :1], IGNORE)], axis=1)
    return {"input_ids": ids, "labels": labels}


def train_trainer(
    args: argparse.Namespace, model: Any, train: Pairs, meta: dict[str, Any], out: Path
) -> dict[str, Any]:
    """The framework's Trainer (paddlenlp's, or PaddleFormers' under ``--runner
    paddleformers``): the stock one (fixed) or dynbatch's adapter of it,
    ``DynamicBatchTrainer`` (dynamic; pack: the same with ``pack_len=--max-len``,
    NOTE [ packed pairs ]), with the same ``TrainingArguments``."""
    import functools

    from dynbatch.memory import peak_memory_mib, reset_peak_memory

    mode, pad_id, epochs = args.worker, meta["pad_id"], args.epochs
    host: TrainerHost = HOSTS[args.runner]  # NOTE [ one Trainer runner, two hosts ]
    framework = host.trainer()
    Trainer, TrainingArguments = framework.Trainer, framework.TrainingArguments

    class Batches(framework.TrainerCallback):  # type: ignore[misc]
        """Real and padded tokens of every trained batch, counted on the batches themselves:
        ``rows x width`` computed, packed rows or padded ones (the fill is ``pad_id``)."""

        real = padded = micro_batches = pairs = 0

        def __init__(self) -> None:
            #: per epoch, DynamicBatchTrainer's windows' pair indices (the stock one has none)
            self.seen: dict[int, list[int]] = {}
            #: the highest peak DynamicBatchTrainer logged: its logs reset the allocator's
            #: peak, so the peak read at the end is only the last interval's
            self.logged_peak = 0.0
            self.logged_step = 0  # the update of the last training-loss line

        def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            logs = logs or {}
            self.logged_peak = max(self.logged_peak, float(logs.get("memory_mib", 0.0)))
            if "loss" in logs:  # the Trainer's training loss since its last log
                say(
                    f"{mode}: {updates(self.logged_step + 1, state.global_step)} of "
                    f"{state.max_steps} (epoch {state.epoch:.2f} of {epochs}): training loss "
                    f"{float(logs['loss']):.4f} (the Trainer's)"
                )
                self.logged_step = state.global_step

        def on_load_data_end(self, args, state, control, inputs=None, **kw):  # type: ignore[no-untyped-def]
            for batch in inputs.get("micro_batches", [inputs]):
                ids = batch["input_ids"].numpy()
                self.real += int((ids != pad_id).sum())
                self.padded += ids.size
                self.pairs += int((ids == meta["bos_id"]).sum())  # each pair's one <s>
                self.micro_batches += 1
            window = inputs.get("window")
            if window is not None:
                picked = self.seen.setdefault(window.epoch, [])
                picked.extend(i for idx in window.indices for i in idx.tolist())

    first = -(-len(train) // args.batch_size)  # both modes' updates an epoch, ceil(N / B)
    training = TrainingArguments(
        output_dir=str(out / "trainer"),
        device="cpu",
        seed=args.seed,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=warmup_steps(first, first * args.epochs),  # as the loop's
        weight_decay=0.01,
        max_grad_norm=1.0,
        logging_steps=max(1, round(first / 4)),  # the training loss each quarter epoch
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        **host.cpu_args,  # what one CPU process needs on this framework
    )
    batches = Batches()  # it prints the training loss the Trainer logs: not the Printer too
    common = {"model": model, "args": training, "train_dataset": Records(train)}
    extra: dict[str, Any] = {}
    if mode == "fixed":  # the model's own loss: the per-token mean of each batch
        collate = functools.partial(collate_records, pad_id=pad_id, shift=True)
        trainer = Trainer(**common, data_collator=collate, callbacks=[batches])
    else:  # dynamic, or pack: the same Trainer on the pack mode's plan (NOTE [ packed pairs ])
        adapter = host.adapter()  # dynbatch.integrations.<framework>
        plan: dict[str, Any] = {"loss_tokens": loss_tokens_of(train)}
        if mode == "pack":  # the recipe's options, each layout priced as it runs
            cost, rows, extra = pack_cost(args, model, meta, train, out)
            step = packed_step_time(args.step_time, rows)
            plan["options"] = pack_options(args, train, cost, rows, step)
        else:
            cost, extra = memory_cost(args, model, meta, train, out)
            plan.update(cost=cost, time_model=None if args.step_time == "none" else args.step_time)
        collate = functools.partial(collate_records, pad_id=pad_id, shift=False)
        trainer = adapter.DynamicBatchTrainer(
            **common,
            data_collator=collate,
            callbacks=[batches],
            lengths=train.lengths,
            accumulate="samples",  # NOTE [ updates in samples, not tokens ] in sft_causal_lm
            loss_fn=adapter.token_cross_entropy,
            labels_to_model=False,
            **plan,
        )
        extra["max_cost_mb"] = float(trainer.train_sampler.max_cost)
        extra["planned_steps"] = trainer.total_steps()
    # the Printer's dict of each log: Batches prints the training loss
    trainer.remove_callback(host.printer_callback())
    gc.collect()
    reset_peak_memory()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    if batches.seen:  # whether each epoch's windows held every pair exactly once
        extra["every_pair_once"] = (
            all(sorted(seen) == list(range(len(train))) for seen in batches.seen.values())
            and len(batches.seen) == args.epochs
        )
    return {
        "wall_seconds": wall,
        "peak_memory_mb": max(peak_memory_mib(), batches.logged_peak),
        "steps": trainer.state.global_step,
        "micro_batches": batches.micro_batches,
        "real_tokens": batches.real,
        "padded_tokens": batches.padded,
        "pairs_trained": batches.pairs,
        "lr_at_end": float(trainer.lr_scheduler.get_lr()),
        **extra,
    }


def run_mode(args: argparse.Namespace) -> int:
    import paddle

    from dynbatch.memory import memory_source

    out = Path(args.output_dir)
    work = out / "work"
    meta = json.loads((work / "meta.json").read_text())
    data = np.load(work / "data.npz")
    train, dev = Pairs(data, "train"), Pairs(data, "dev")
    paddle.seed(args.seed)
    np.random.seed(args.seed)
    model = build_model(meta, args.max_len, args.runner)
    runner = train_loop if args.runner == "loop" else train_trainer
    # the held-out pairs before training: where the loss and the accuracy start from
    loss_before, accuracy_before = evaluate(model, dev, meta["pad_id"])
    majority = f"always {meta['dev_majority_answer']}: {meta['dev_majority_share']:.4f}"
    say(
        f"{args.worker}: held-out before training: loss {loss_before:.4f} per loss token, "
        f"answer accuracy {accuracy_before:.4f} ({majority})"
    )
    result = runner(args, model, train, meta, out)
    eval_loss, answer_accuracy = evaluate(model, dev, meta["pad_id"])
    row = {
        "mode": args.worker,
        "runner": args.runner,
        "seed": args.seed,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "train_pairs": len(train),
        "dev_pairs": len(dev),
        "eval_loss": eval_loss,
        "eval_answer_accuracy": answer_accuracy,
        "eval_loss_before": loss_before,
        "eval_answer_accuracy_before": accuracy_before,
        "real_tokens_per_sec": result["real_tokens"] / result["wall_seconds"],
        # real tokens over the tokens computed (rows x width), as the BERT example's column
        "padding_efficiency": result["real_tokens"] / result["padded_tokens"],
        "memory_source": memory_source(),
        "lr": args.lr,
        **result,
    }
    (work / f"{args.worker}.json").write_text(json.dumps(row))
    print(
        f"{row['mode']} ({row['runner']}): {row['steps']} updates in {row['wall_seconds']:.1f} s, "
        f"{row['real_tokens_per_sec']:.0f} real tokens/s, peak {row['peak_memory_mb']:.1f} MiB; "
        f"held-out loss {loss_before:.4f} -> {eval_loss:.4f} per loss token, answer accuracy "
        f"{accuracy_before:.4f} -> {answer_accuracy:.4f} ({majority})",
        flush=True,
    )
    if abs(answer_accuracy - meta["dev_majority_share"]) < 0.005:
        print(
            f"{args.worker}: that is the majority's share: one answer for every review, nothing "
            "learnt from the reviews (too few updates for a model from random weights; the "
            "defaults, 2,000 pairs for 2 epochs, learn it)",
            flush=True,
        )
    return 0
