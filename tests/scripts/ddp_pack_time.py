"""Two ranks train an epoch packed at the step time (NOTE [ choosing packing per update ]);
run under `python -m paddle.distributed.launch --nproc_per_node 2 ddp_pack_time.py OUT_DIR N
[TIME [MAX_COST]]`; TIME ``none``: no time model, every micro-batch packed (default ``step``:
:data:`STEP`); MAX_COST (default 256, linear: two rows of 128 a micro-batch; 128: one) makes an
update of 16 samples (8 a rank) span several steps.

The collator is ``PackCollator.for_sampler(sampler)`` in 2 DataLoader workers. Each rank
writes OUT_DIR/rank{r}.json: the samples it trained on (real micro-batches), its
micro-batch count, the widths of its micro-batches, its final parameters; what each
micro-batch it was given held (``micro_batches``: its rows, each the indices of its samples
in order, read back from the labels at each sample's start), whether the sampler flagged it a
repeat (``padding``), the layout its plan priced (``layouts``: packed, rows, width) and the
shape the workers built (``shapes``); and the plan's ``window_ends``, ``seed`` and
``update_size``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
from launched import finish

import dynbatch
from dynbatch.plan.packs import PackLayout

STEP = dynbatch.StepTimeModel(c=0.02, a=2e-6, b=0.0)


class Samples(paddle.io.Dataset):  # type: ignore[misc]
    """Sample ``i``: its tokens are ``i % 499 + 1``; one long sample in about ten."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(3)
        long = rng.random(n) < 0.1
        self.lengths = np.where(long, rng.integers(100, 129, n), rng.integers(4, 16, n))

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        ids = np.full(int(self.lengths[i]), i % 499 + 1, dtype=np.int64)
        return {"input_ids": ids, "labels": np.full_like(ids, i)}

    def __len__(self) -> int:
        return int(self.lengths.size)


class Tokens(paddle.nn.Layer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(500, 8)
        self.out = paddle.nn.Linear(8, 2)

    def forward(self, ids):  # type: ignore[no-untyped-def]
        return self.out(self.emb(ids))


def main() -> None:
    out_dir, n = Path(sys.argv[1]), int(sys.argv[2])
    timed = (sys.argv[3] if len(sys.argv) > 3 else "step") == "step"
    max_cost = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    dist.init_parallel_env()
    rank = dist.get_rank()
    paddle.seed(1234)
    ds = Samples(n)
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds,
        lengths=ds.lengths,
        batch_size=8,
        pack_len=128,
        max_cost=max_cost,
        time_model=STEP if timed else None,
        seed=5,
    )
    collate = dynbatch.PackCollator.for_sampler(sampler, causal=False, shift=False)
    loader = paddle.io.DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=2)
    model = paddle.DataParallel(Tokens())
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    padding = sampler.padding_mask(0)
    planned = sampler.batches(0)  # this rank's micro-batches, as its plan priced them
    layout = PackLayout.from_options(sampler.options)
    seen, widths, batches, micro_batches, layouts, shapes = [], [], 0, [], [], []
    for k, batch in enumerate(loader):
        labels = batch["labels"]
        logits = model(batch["input_ids"])
        losses = paddle.nn.functional.cross_entropy(
            logits, (labels.clip(min=0) % 2).unsqueeze(-1), reduction="none"
        ).squeeze(-1)
        weight = (labels >= 0).astype("float32") * (0.0 if padding[k] else 1.0)
        (losses * weight).sum().backward()  # every rank's step: an all-reduce each
        opt.step()
        opt.clear_grad()
        if not padding[k]:
            seen += sorted(set(labels.numpy()[labels.numpy() >= 0].tolist()))
        widths.append(int(batch["input_ids"].shape[1]))
        starts, ids = batch["sample_starts"].numpy(), labels.numpy()
        micro_batches.append([ids[r, row[row >= 0]].tolist() for r, row in enumerate(starts)])
        lens, bounds = ds.lengths[planned[k]], np.array([0, planned[k].size])
        rows, width = layout.shapes(lens, bounds)
        packed = not timed or bool(layout.choose(lens, bounds).packed[0])
        layouts.append([packed, int(rows[0]), int(width[0])])
        shapes.append(list(batch["input_ids"].shape))
        batches += 1
    record = {
        "seen": seen,
        "batches": batches,
        "widths": widths,
        "micro_batches": micro_batches,
        "layouts": layouts,
        "shapes": shapes,
        "padding": padding.tolist(),
        "window_ends": sampler.epoch_plan(0).window_ends.tolist(),
        "seed": sampler.options.seed,
        "update_size": sampler.options.update_size,
        "params": {
            k: np.asarray(v.numpy()).ravel().tolist() for k, v in model.state_dict().items()
        },
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
