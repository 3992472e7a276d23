"""Two epochs of DataParallel training on a DynamicBatchIterable with 2 DataLoader workers; run
under `python -m paddle.distributed.launch --nproc_per_node 2 stream_ddp.py OUT_DIR N MODE`.

Each rank writes OUT_DIR/rank{r}.json: the indices it trained on per epoch (flagged repeats
left out), its batch counts, the updates a first pass predicted and those taken, and its
final parameters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
from launched import finish
from stream_common import collate, stream
from toy import Bag

import dynbatch


def main() -> None:
    out_dir, n, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_parallel_env()
    rank = dist.get_rank()
    paddle.seed(1234)  # the same initial weights on every rank
    it = stream(out_dir, n, mode)
    loader = it.loader(collate, num_workers=2)
    model = paddle.DataParallel(Bag())
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    acc = dynbatch.GradientAccumulator(model, opt, sampler=it, target=48)
    record = {"rank": rank, "epochs": [], "batches": [], "predicted": [], "updates": []}
    for epoch in range(2):
        it.set_epoch(epoch)
        record["predicted"].append(acc.steps_per_epoch(epoch))  # a first pass
        before = acc.optimizer_steps
        seen, batches = [], 0
        for ids, index in loader:
            batches += 1
            with acc.accumulate():
                logits = model(ids)
                labels = (index % 2).unsqueeze(-1)
                losses = paddle.nn.functional.cross_entropy(logits, labels, reduction="none")
                acc.backward(losses.sum(), count=ids.shape[0])
            if not it.taken().info.padding:
                seen.extend(index.numpy().tolist())
        record["epochs"].append(seen)
        record["batches"].append(batches)  # iterated: a hang would show here
        record["updates"].append(acc.optimizer_steps - before)
    record["params"] = {
        k: np.asarray(v.numpy()).ravel().tolist() for k, v in model.state_dict().items()
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
