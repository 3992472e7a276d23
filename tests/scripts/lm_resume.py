"""DynamicBatchTrainer on token losses, stopped dead after a mid-epoch checkpoint and resumed.

    python lm_resume.py OUT_DIR full | cut STEP | resume

As trainer_resume.py, for the tiny causal LM of lm_toy.py: updates planned in loss tokens
(loss_tokens=), each the exact mean over them (token_cross_entropy), attention dropout on so
the resumed run only matches if the RNG state is restored too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from lm_toy import Pairs, collate, tiny_lm
from trainer_resume import ExitAfterSave
from trainer_toy import make_args, make_recorder

from dynbatch.integrations.paddlenlp import DynamicBatchTrainer, token_cross_entropy


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    ds = Pairs(64, seed=12)
    run_dir = out / ("full" if mode == "full" else "cut")
    args = make_args(run_dir, per_device_train_batch_size=16, save_strategy="steps", save_steps=3)
    rec = make_recorder()
    callbacks = [rec]
    if mode == "cut":
        callbacks.append(ExitAfterSave(out, int(sys.argv[3]), rec))
    trainer = DynamicBatchTrainer(
        model=tiny_lm(dropout=0.1),
        args=args,
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        loss_tokens=ds.loss_tokens,
        accumulate="tokens",
        loss_fn=token_cross_entropy,
        callbacks=callbacks,
    )
    result = trainer.train(resume_from_checkpoint=True if mode == "resume" else None)
    (out / f"{mode}.json").write_text(
        json.dumps(
            {
                "batches": [i.tolist() for w in rec.windows for i in w.indices],
                "global_step": trainer.state.global_step,
                "max_steps": trainer.state.max_steps,
                "planned": sum(trainer.steps_per_epoch(e) for e in range(2)),
                "training_loss": result.training_loss,
            }
        )
    )
    np.savez(out / f"{mode}.npz", **{k: v.numpy() for k, v in trainer.model.state_dict().items()})


if __name__ == "__main__":
    main()
