"""Two ranks train an epoch packed at the step time (NOTE [ choosing packing per update ]);
run under `python -m paddle.distributed.launch --nproc_per_node 2 ddp_pack_time.py OUT_DIR N`.

The collator is ``PackCollator.for_sampler(sampler)`` in 2 DataLoader workers; each rank
writes OUT_DIR/rank{r}.json: the samples it trained on (real micro-batches), its micro-batch
count, each micro-batch's shape as built and as the planner priced it (rows or samples,
width), whether the plan packed it, and its final parameters.
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
from dynbatch.plan.packs import plan_timed_packs

#: Dense attention over a row's width (b): short samples run faster padded than as one row.
STEP = dynbatch.StepTimeModel(c=0.02, a=2e-6, b=2e-8)


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
    dist.init_parallel_env()
    rank = dist.get_rank()
    paddle.seed(1234)
    ds = Samples(n)
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, batch_size=8, pack_len=128, time_model=STEP, seed=5
    )
    collate = dynbatch.PackCollator.for_sampler(sampler, causal=False, shift=False)
    loader = paddle.io.DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=2)
    model = paddle.DataParallel(Tokens())
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    padding = sampler.padding_mask(0)
    chosen = plan_timed_packs(ds.lengths, sampler.options, 0, num_replicas=2)
    n, width = chosen.step_shapes  # step-major: this rank's are every other from its own
    priced = np.stack([n, width], axis=1)[rank::2].tolist()
    seen, shapes, batches = [], [], 0
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
        shapes.append([int(d) for d in batch["input_ids"].shape])
        batches += 1
    record = {
        "seen": seen,
        "batches": batches,
        "shapes": shapes,
        "priced": priced,
        "packed": chosen.packed[rank::2].tolist(),
        "params": {
            k: np.asarray(v.numpy()).ravel().tolist() for k, v in model.state_dict().items()
        },
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
