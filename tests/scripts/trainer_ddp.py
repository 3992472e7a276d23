"""DynamicBatchTrainer on 2 ranks (gloo): train 2 epochs with accumulation, evaluate, report.

    python -m paddle.distributed.launch --nproc_per_node 2 trainer_ddp.py OUT_DIR

Each rank writes OUT_DIR/rank{r}.json: the samples it trained per epoch, its step counts
(and the count a plain sampler gives), the largest difference between the first step's
gradient and the gradient of the mean loss over both ranks' samples of that step, its eval
metrics against a one-pass reference, its eval batch sizes and a digest of its weights.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import paddle
from launched import finish
from trainer_toy import (
    PLAN,
    Reviews,
    direct_eval,
    make_args,
    make_recorder,
    reference_grads,
    review_data,
    tiny_bert,
)

import dynbatch
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer


def main() -> None:
    out = Path(sys.argv[1])
    ds, dev = Reviews(60), Reviews(23, seed=5)
    args = make_args(out / "run", gradient_accumulation_steps=2)
    rank = args.dataset_rank
    rec = make_recorder(grads=1)
    trainer = DynamicBatchTrainer(
        model=tiny_bert(),
        args=args,
        callbacks=[rec],
        **review_data(ds, dev),
        **PLAN,
    )
    trainer.train()
    metrics = trainer.evaluate()

    plain = dynbatch.DistributedDynamicBatchSampler(
        lengths=ds.lengths, num_replicas=2, rank=rank, **PLAN
    )
    expected = sum(math.ceil(plain.len_for_epochs([e]) / 2) for e in range(2))

    first = rec.windows[0]
    sharded = trainer.train_sampler.epoch_plan(first.epoch)
    rows = range(first.start * 2, first.stop * 2)
    union = np.concatenate([sharded.plan[k] for k in rows if not sharded.is_padding[k]])
    ref = tiny_bert()
    ref.set_state_dict(rec.weights[0])
    grads = reference_grads(ref, ds, union, np.ones(union.size))
    diff = max(float(np.abs(rec.grads[0][n] - g).max()) for n, g in grads.items())

    acc, loss = direct_eval(trainer.model, dev)
    epochs: dict[int, list[int]] = {0: [], 1: []}
    for w in rec.windows:
        for idx, padding in zip(w.indices, w.padding, strict=True):
            if not padding:
                epochs[w.epoch].extend(idx.tolist())
    eval_sampler = trainer.get_eval_dataloader().batch_sampler
    params = np.concatenate([p.numpy().ravel() for p in trainer.model.parameters()])
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "samples": len(ds),
                "epochs": epochs,
                "optimizer_steps": rec.optimizer_steps,
                "max_steps": trainer.state.max_steps,
                "expected_steps": expected,
                "grad_diff": diff,
                "eval": {k: v for k, v in metrics.items() if k in ("eval_accuracy", "eval_loss")},
                "reference_accuracy": acc,
                "reference_loss": loss,
                "eval_batch_sizes": [int(b.size) for b in eval_sampler.batches()],
                "params": params[::97].tolist(),
            }
        )
    )
    paddle.distributed.barrier()


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
