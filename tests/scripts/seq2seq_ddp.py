"""DynamicBatchTrainer on a tiny BART over 2 ranks (gloo): the default loss's exact mean.

    python -m paddle.distributed.launch --nproc_per_node 2 seq2seq_ddp.py OUT_DIR

The fixed batch's recipe on (source, target) pairs, 4 a rank, 2 epochs, the loss the default
(the mean over the target tokens). Each rank writes OUT_DIR/rank{r}.json: the samples it
trained per epoch, its step counts, for each of the first STEPS steps the largest difference
between its gradient and that of the mean over every target token of the step's samples on
both ranks (one batch, one process), and the target tokens each rank trained in that step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle
from launched import finish
from seq2seq_toy import Translations, grad_gap, reference_grads, s2s_trainer, tiny_bart
from trainer_toy import make_recorder

STEPS = 3


def main() -> None:
    out = Path(sys.argv[1])
    ds = Translations(40, seed=7)
    rec = make_recorder(grads=STEPS)
    trainer = s2s_trainer(out / "run", ds, args={"per_device_train_batch_size": 4}, callbacks=[rec])
    rank = trainer.args.dataset_rank
    trainer.train()

    gaps, targets = [], []
    for step in range(STEPS):
        window = rec.windows[step]
        sharded = trainer.train_sampler.epoch_plan(window.epoch)
        rows = range(window.start * 2, window.stop * 2)  # both ranks' micro-batches
        union = np.concatenate([sharded.plan[k] for k in rows if not sharded.is_padding[k]])
        ref = tiny_bart()
        ref.set_state_dict(rec.weights[step])
        gaps.append(grad_gap(rec.grads[step], reference_grads(ref, ds, union)))
        mine = [idx for idx, pad in zip(window.indices, window.padding, strict=True) if not pad]
        targets.append(int(ds.lengths[np.concatenate(mine), 1].sum()) if mine else 0)
    epochs: dict[int, list[int]] = {0: [], 1: []}
    for w in rec.windows:
        for idx, padding in zip(w.indices, w.padding, strict=True):
            if not padding:
                epochs[w.epoch].extend(idx.tolist())
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "samples": len(ds),
                "epochs": epochs,
                "optimizer_steps": rec.optimizer_steps,
                "max_steps": trainer.state.max_steps,
                "planned": trainer.total_steps(),
                "grad_gaps": gaps,
                "target_tokens": targets,
            }
        )
    )
    paddle.distributed.barrier()


if __name__ == "__main__":
    main()
    finish()  # NOTE [ ending a launched script ]
