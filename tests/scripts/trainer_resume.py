"""DynamicBatchTrainer, stopped dead after a mid-epoch checkpoint and resumed in a new process.

    python trainer_resume.py KIND OUT_DIR full           # uninterrupted, 2 epochs
    python trainer_resume.py KIND OUT_DIR cut STEP       # os._exit(3) right after checkpoint-STEP
    python trainer_resume.py KIND OUT_DIR resume         # train(resume_from_checkpoint=True)

KIND is ``cls`` (the tiny BERT of trainer_toy.py, per-sample losses, 2 micro-batches a step)
or ``lm`` (the tiny causal LM of lm_toy.py: updates planned in loss tokens, each the exact
mean over them). Each run that finishes writes OUT_DIR/<mode>.json (its batches, steps,
loss, epoch) and OUT_DIR/<mode>.npz (final weights); ``cut`` writes its batches as it goes to
cut.json. Dropout is on, so the resumed run only matches if the RNG state is restored too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from paddlenlp.trainer import TrainerCallback
from trainer_toy import PLAN, Reviews, collate, make_args, make_recorder, tiny_bert

from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

#: Where each kind saves: every SAVE_STEPS steps, so a cut at that step is mid-epoch.
SAVE_STEPS = {"cls": 4, "lm": 3}


class ExitAfterSave(TrainerCallback):  # type: ignore[misc]
    def __init__(self, out: Path, step: int, rec: Any) -> None:
        self.out, self.step, self.rec = out, step, rec

    def on_save(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.global_step == self.step:
            windows = self.rec.windows
            (self.out / "cut.json").write_text(
                json.dumps(
                    {
                        "batches": [i.tolist() for w in windows for i in w.indices],
                        "last_epoch": windows[-1].epoch,
                        "ends_epoch": windows[-1].ends_epoch,
                    }
                )
            )
            os._exit(3)  # no clean-up, no final save: as if the job was killed


def make_trainer(kind: str, run_dir: Path, callbacks: list[Any]) -> DynamicBatchTrainer:
    saves = {"save_strategy": "steps", "save_steps": SAVE_STEPS[kind]}
    if kind == "lm":
        from lm_toy import Pairs, lm_trainer

        return lm_trainer(run_dir, Pairs(64, seed=12), args=saves, callbacks=callbacks, dropout=0.1)
    ds = Reviews(60)
    return DynamicBatchTrainer(
        model=tiny_bert(dropout=0.1),
        args=make_args(run_dir, gradient_accumulation_steps=2, **saves),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        callbacks=callbacks,
        **PLAN,
    )


def main() -> None:
    kind, out, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    rec = make_recorder()
    callbacks = [rec]
    if mode == "cut":
        callbacks.append(ExitAfterSave(out, int(sys.argv[4]), rec))
    trainer = make_trainer(kind, out / ("full" if mode == "full" else "cut"), callbacks)
    result = trainer.train(resume_from_checkpoint=True if mode == "resume" else None)
    (out / f"{mode}.json").write_text(
        json.dumps(
            {
                "batches": [i.tolist() for w in rec.windows for i in w.indices],
                "global_step": trainer.state.global_step,
                "max_steps": trainer.state.max_steps,
                "planned": trainer.total_steps(),
                "training_loss": result.training_loss,
                "epoch": trainer.state.epoch,
            }
        )
    )
    np.savez(out / f"{mode}.npz", **{k: v.numpy() for k, v in trainer.model.state_dict().items()})


if __name__ == "__main__":
    main()
