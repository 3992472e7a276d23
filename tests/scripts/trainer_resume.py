"""DynamicBatchTrainer, stopped dead after a mid-epoch checkpoint and resumed in a new process.

    python trainer_resume.py KIND OUT_DIR full           # uninterrupted, 2 epochs
    python trainer_resume.py KIND OUT_DIR cut STEP       # os._exit(3) right after checkpoint-STEP
    python trainer_resume.py KIND OUT_DIR kill STEP      # SIGKILL itself at the end of step STEP
    python trainer_resume.py KIND OUT_DIR resume         # train(resume_from_checkpoint=True)

KIND is ``cls`` (the tiny BERT of trainer_toy.py, per-sample losses, 2 micro-batches a step),
``lm`` (the tiny causal LM of lm_toy.py: updates planned in loss tokens, each the exact
mean over them) or ``recipe`` (the tiny BERT with the Trainer's defaults: no plan options, the
step time probed on the model, as the default does on an accelerator, and kept in the output
dir, 2 loader workers); ``packcls`` and
``packlm`` are ``cls`` and ``lm`` packed (``pack_len``, one row a micro-batch, no probe:
NOTE [ the Trainer packs ]), the recipe's updates of 8 reviews or 16 pairs' loss tokens; ``s2s``
is the tiny BART of seq2seq_toy.py on (source, target) pairs with the Trainer's defaults (the
recipe's updates of 4 pairs, the target tokens' mean, 2 loader workers); ``s2stime`` is ``s2s``
planned at a step time of two lengths (a ``PairStepTimeModel`` given, some updates cut),
and ``s2sfollow`` the same but resumed with ``time_model`` left out, so the resume plans by
the step time its checkpoint holds. Each run
that finishes writes OUT_DIR/<mode>.json (its batches, steps, loss, epoch) and OUT_DIR/<mode>.npz
(final weights); ``cut`` writes its batches as it goes to cut.json. ``kill`` resumes from the
newest checkpoint of OUT_DIR/cut when it has one, and writes kill-STEP.json (the step it
started from, its batches and the planned steps) before it kills itself: nothing else is
cleaned up or saved. Dropout is on, so the resumed run only matches if the RNG state is
restored too.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
from paddlenlp.trainer import TrainerCallback
from trainer_toy import PLAN, Reviews, collate, make_args, make_recorder, tiny_bert

from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

#: Where each kind saves: every SAVE_STEPS steps, so a cut at that step is mid-epoch.
SAVE_STEPS = {
    "cls": 4,
    "lm": 3,
    "recipe": 3,
    "packcls": 4,
    "packlm": 3,
    "s2s": 3,
    "s2stime": 3,
    "s2sfollow": 3,
}
#: ``s2stime``'s step time of (source, target) pairs: it cuts 10 updates of 4 pairs into 14
#: micro-batches an epoch (the padding-free split makes 40, whole updates 10).
PAIR_STEP = "0.001,1e-5,2e-5,0,1e-7,1e-7"


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


class KillAtStep(TrainerCallback):  # type: ignore[misc]
    """``kill -9`` at the end of step ``step``, before any checkpoint of that step is saved."""

    def __init__(self, out: Path, step: int, rec: Any, trainer: list[Any]) -> None:
        self.out, self.step, self.rec, self.trainer = out, step, rec, trainer

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.global_step == self.step:
            trainer = self.trainer[0]
            (self.out / f"kill-{self.step}.json").write_text(
                json.dumps(
                    {
                        "start": trainer.resumed_step or 0,
                        "batches": [[i.tolist() for i in w.indices] for w in self.rec.windows],
                        "planned": trainer.total_steps(),
                    }
                )
            )
            os.killpg(os.getpgid(0), signal.SIGKILL)  # the job: this process and its workers


def make_trainer(
    kind: str, run_dir: Path, callbacks: list[Any], mode: str = "full"
) -> DynamicBatchTrainer:
    saves = {"save_strategy": "steps", "save_steps": SAVE_STEPS[kind]}
    pack: dict[str, Any] = {"max_batch_size": 1, "time_model": None}
    if kind in ("lm", "packlm"):
        from lm_toy import Pairs, lm_trainer

        packed = {**pack, "pack_len": 64} if kind == "packlm" else {}
        return lm_trainer(
            run_dir, Pairs(64, seed=12), args=saves, callbacks=callbacks, dropout=0.1, **packed
        )
    if kind.startswith("s2s"):  # the tiny BART of seq2seq_toy.py on pairs, the defaults
        from seq2seq_toy import Translations, s2s_trainer

        args = {"per_device_train_batch_size": 4, "dataloader_num_workers": 2, **saves}
        timed = kind == "s2stime" or (kind == "s2sfollow" and mode != "resume")
        return s2s_trainer(
            run_dir,
            Translations(40, seed=3),
            args=args,
            callbacks=callbacks,
            dropout=0.1,
            **({"time_model": PAIR_STEP} if timed else {}),
        )
    ds = Reviews(60)
    if kind == "packcls":
        return DynamicBatchTrainer(
            model=tiny_bert(dropout=0.1),
            args=make_args(run_dir, per_device_train_batch_size=8, **saves),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            callbacks=callbacks,
            pack_len=40,
            **pack,
        )
    if kind == "recipe":  # the defaults, the step time probed, then read back on resume
        return DynamicBatchTrainer(
            model=tiny_bert(dropout=0.1),
            args=make_args(
                run_dir, per_device_train_batch_size=6, dataloader_num_workers=2, **saves
            ),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            callbacks=callbacks,
            time_model="measure",  # the default on an accelerator; here on the CPU too
        )
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
    made: list[Any] = []
    if mode == "cut":
        callbacks.append(ExitAfterSave(out, int(sys.argv[4]), rec))
    if mode == "kill":
        if os.getpgid(0) != os.getpid():  # a session leader (processes.run) leads its group
            os.setpgid(0, 0)  # a group of its own, the loader's workers to come in it
        callbacks.append(KillAtStep(out, int(sys.argv[4]), rec, made))
    run_dir = out / ("full" if mode == "full" else "cut")
    trainer = make_trainer(kind, run_dir, callbacks, mode)
    made.append(trainer)
    resume = mode == "resume" or (mode == "kill" and any(run_dir.glob("checkpoint-*")))
    result = trainer.train(resume_from_checkpoint=True if resume else None)
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
