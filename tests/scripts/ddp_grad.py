"""Across 2 ranks: the accumulated, normalised update equals one pass over the union.

    python -m paddle.distributed.launch --nproc_per_node 2 ddp_grad.py OUT_DIR N MAX_BATCH

Every micro-batch but the last runs under no_sync; the optimizer (SGD, lr 1) steps once.
Each rank recomputes the gradient of the mean loss over every real sample of the epoch
in one pass, from the same initial weights, and writes its largest difference. With
fewer samples than ranks' batches (N=3, MAX_BATCH=1), one rank's batch repeats a sample
only to even out the step count: it must weigh nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
from launched import finish
from toy import Bag, Toy, per_sample_loss

import dynbatch


def collate(ds: Toy, idx: np.ndarray):  # type: ignore[no-untyped-def]
    ids, index = dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack())([ds[int(i)] for i in idx])
    return paddle.to_tensor(ids), paddle.to_tensor(index)


def main() -> None:
    out_dir, n, max_batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dist.init_parallel_env()
    rank = dist.get_rank()
    ds = Toy(n, seed=9)
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=3 * 160**2, seed=4, max_batch_size=max_batch
    )
    paddle.seed(42)
    net = Bag()
    start = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    model = paddle.DataParallel(net)
    acc = dynbatch.GradientAccumulator(
        model, paddle.optimizer.SGD(1.0, parameters=model.parameters()), sampler=sampler, target=1e9
    )
    micro = 0
    for idx in sampler.batches():
        ids, index = collate(ds, idx)
        with acc.accumulate():
            acc.backward(per_sample_loss(model, ids, index).sum(), count=idx.size)
        micro += 1
    after = {k: v.numpy() for k, v in net.state_dict().items()}

    ref = Bag()
    ref.set_state_dict({k: paddle.to_tensor(v) for k, v in start.items()})
    sharded = sampler.epoch_plan()
    real = [b for b, pad in zip(sharded.plan, sharded.is_padding, strict=True) if not pad]
    every = np.concatenate(real)
    ids, index = collate(ds, every)
    per_sample_loss(ref, ids, index).mean().backward()
    diff = max(
        float(np.abs(after[n] - (start[n] - p.grad.numpy())).max())
        for n, p in ref.named_parameters()
    )
    (out_dir / f"grad{rank}.json").write_text(
        json.dumps(
            {
                "max_abs_diff": diff,
                "micro_batches": micro,
                "repeats": int(sampler.padding_mask().sum()),
                "real_samples": int(every.size),
                "steps": acc.optimizer_steps,
                "params": {k: v.ravel().tolist() for k, v in after.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
