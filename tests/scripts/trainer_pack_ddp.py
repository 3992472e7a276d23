"""DynamicBatchTrainer(pack_len=...) on 2 ranks (gloo): a packed classifier, 2 epochs.

    python -m paddle.distributed.launch --nproc_per_node 2 trainer_pack_ddp.py OUT_DIR

Each rank writes OUT_DIR/rank{r}.json: the samples it trained per epoch, its step counts
(and a plain sampler's), whether the first update packed several samples a row over several
micro-batches, the largest difference between the first update's gradient and that of the
mean loss over both ranks' samples of it, each alone, and a digest of its weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
from launched import finish
from trainer_toy import Reviews, collate, make_args, make_recorder, reference_grads, tiny_bert

import dynbatch
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

PACK = {"pack_len": 40, "max_batch_size": 1, "time_model": None}


def main() -> None:
    out = Path(sys.argv[1])
    ds = Reviews(60)
    args = make_args(out / "run", per_device_train_batch_size=4)
    rank = args.dataset_rank
    rec = make_recorder(grads=1)
    trainer = DynamicBatchTrainer(
        model=tiny_bert(initializer_range=0.2),
        args=args,
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        callbacks=[rec],
        **PACK,
    )
    trainer.train()
    plain = dynbatch.DistributedDynamicBatchSampler(
        lengths=ds.lengths, num_replicas=2, rank=rank, batch_size=4, pack_len=40, max_batch_size=1
    )
    first = rec.windows[0]
    sharded = trainer.train_sampler.epoch_plan(first.epoch)
    rows = range(first.start * 2, first.stop * 2)
    union = np.concatenate([sharded.plan[k] for k in rows if not sharded.is_padding[k]])
    ref = tiny_bert(initializer_range=0.2)
    ref.set_state_dict(rec.weights[0])
    grads = reference_grads(ref, ds, union, np.ones(union.size))
    diff = max(float(np.abs(rec.grads[0][n] - g).max()) for n, g in grads.items())
    epochs: dict[int, list[int]] = {0: [], 1: []}
    for w in rec.windows:
        for idx, padding in zip(w.indices, w.padding, strict=True):
            if not padding:
                epochs[w.epoch].extend(idx.tolist())
    params = np.concatenate([p.numpy().ravel() for p in trainer.model.parameters()])
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "samples": len(ds),
                "epochs": epochs,
                "optimizer_steps": rec.optimizer_steps,
                "max_steps": trainer.state.max_steps,
                "expected_steps": plain.steps_for_epochs(range(2)),
                "packed": first.stop - first.start > 1 and max(i.size for i in first.indices) > 1,
                "grad_diff": diff,
                "params": params[::7].tolist(),
            }
        )
    )
    paddle.distributed.barrier()


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
