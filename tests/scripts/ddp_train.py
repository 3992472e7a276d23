"""Two epochs of DataParallel training with DistributedDynamicBatchSampler; run under
`python -m paddle.distributed.launch --nproc_per_node 2 ddp_train.py OUT_DIR N`.

Each rank writes OUT_DIR/rank{r}.json: the indices it trained on per epoch, its batch
counts, and its final parameters.
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


def main() -> None:
    out_dir, n = Path(sys.argv[1]), int(sys.argv[2])
    dist.init_parallel_env()
    rank = dist.get_rank()
    paddle.seed(1234)  # the same initial weights on every rank
    ds = Toy(n)
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=6 * 80**2, seed=7
    )
    loader = paddle.io.DataLoader(
        ds, batch_sampler=sampler, collate_fn=dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack())
    )
    model = paddle.DataParallel(Bag())
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    record = {"rank": rank, "world": dist.get_world_size(), "epochs": [], "batches": []}
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen, batches = [], 0
        for ids, index in loader:
            batches += 1
            loss = per_sample_loss(model, ids, index).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            seen.extend(index.numpy().tolist())
        record["epochs"].append(seen)
        record["batches"].append(batches)  # iterated, not len(): a hang would show here
    record["params"] = {
        k: np.asarray(v.numpy()).ravel().tolist() for k, v in model.state_dict().items()
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
