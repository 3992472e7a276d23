"""DynamicBatchTrainer saved on some ranks and resumed on another number of them (gloo, CPU).

    python -m paddle.distributed.launch --nproc_per_node R trainer_ranks.py OUT RUN MODE [BATCH]

MODE ``full`` trains the fixed batch's recipe (no time model) for 2 epochs, ``stop`` the same,
stopping once checkpoint-STOP is saved, ``resume`` resumes RUN's newest checkpoint, ``restop``
resumes it and stops once checkpoint-2xSTOP is saved, ``again`` resumes the newest. BATCH is
``per_device_train_batch_size`` (default: GLOBAL / ranks, the global update kept). Each rank
writes OUT/<RUN>-<MODE>-rank<r>.json: every optimizer step's global step, real epoch and the
real samples this rank trained in it, the ``state.epoch`` each step logged, the run's final
global step and its planned total; a
refusal is written to OUT/<RUN>-<MODE>-error.txt instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from launched import finish
from paddlenlp.trainer import TrainerCallback
from trainer_toy import Reviews, collate, make_args, tiny_bert

from dynbatch.errors import InputError
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

GLOBAL = 8  # samples per optimizer step over all ranks
STOP = 3  # the step a stopped run saves at and ends after (an update's end)


class Steps(TrainerCallback):  # type: ignore[misc]
    """Each step's global step and the real samples this rank trained in it."""

    def __init__(self, stop: int | None) -> None:
        self.stop, self.window = stop, None
        self.steps: list[int] = []
        self.epochs: list[int] = []
        self.samples: list[list[int]] = []
        self.progress: dict[int, float] = {}  # each global step's logged state.epoch

    def on_load_data_end(self, args, state, control, inputs=None, **kw):  # type: ignore[no-untyped-def]
        self.window = inputs["window"]

    def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
        w = self.window
        ids = [i for idx, pad in zip(w.indices, w.padding, strict=True) if not pad for i in idx]
        self.steps.append(int(state.global_step))
        self.epochs.append(int(w.epoch))
        self.samples.append([int(i) for i in ids])
        if self.stop is not None and state.global_step == self.stop:
            control.should_training_stop = True  # saved at this step, then the job ends
        return control

    def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
        if logs and "loss" in logs:
            self.progress[int(state.global_step)] = float(logs["progress_or_epoch"])


def main() -> None:
    out, run, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    probe = make_args(out)
    ranks = probe.dataset_world_size
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else GLOBAL // ranks
    stop = {"stop": STOP, "restop": 2 * STOP}.get(mode)
    saves = {"save_strategy": "steps", "save_steps": STOP} if stop else {}
    args = make_args(out / run, per_device_train_batch_size=batch, **saves)
    rec = Steps(stop)
    ds = Reviews(60)
    name = f"{run}-{mode}"
    try:
        trainer = DynamicBatchTrainer(
            model=tiny_bert(),
            args=args,
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            callbacks=[rec],
            time_model=None,
        )
        trainer.train(resume_from_checkpoint=None if mode in ("full", "stop") else True)
    except InputError as exc:
        if args.dataset_rank == 0:
            (out / f"{name}-error.txt").write_text(str(exc))
        finish()
    (out / f"{name}-rank{args.dataset_rank}.json").write_text(
        json.dumps(
            {
                "steps": rec.steps,
                "epochs": rec.epochs,
                "samples": rec.samples,
                "progress": sorted(rec.progress.items()),
                "global_step": int(trainer.state.global_step),
                "planned": trainer.total_steps(),
            }
        )
    )
    finish()


if __name__ == "__main__":
    main()
