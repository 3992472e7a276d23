"""DynamicBatchTrainer on PaddleFormers' Trainer: 2 gloo ranks trained, killed, resumed on 2 and 1.

    python -m paddle.distributed.launch --nproc_per_node 2 pf_ranks.py OUT first
    python -m paddle.distributed.launch --nproc_per_node 2 pf_ranks.py OUT resume
    python pf_ranks.py OUT rest

``first`` trains run ``whole`` (the fixed batch's recipe, :data:`GLOBAL` samples an update over
the ranks, 2 epochs, then evaluated on dynamic batches), then run ``killed``, the same with a
checkpoint every :data:`SAVE` steps, in which each rank SIGKILLs itself at the end of step
:data:`KILL`. ``resume`` resumes ``killed`` with ``resume_from_checkpoint=True``; ``rest``
resumes its checkpoint-SAVE on this one rank, ``per_device_train_batch_size`` the whole
update, into run ``rest``. The arguments keep PaddleFormers' default checkpoint format (the
Trainer's copy sets it: NOTE [ PaddleFormers' defaults ]). Each run that finishes writes
OUT/<run>-rank<r>.json: each step's global step, real epoch and this rank's real samples, its
last global step and the run's planned steps; rank 0 writes OUT/<run>.npz, the weights.
``whole`` adds the first step's gradient against that of the mean over both ranks' samples,
and its evaluation against one pass over the set.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import lm_toy
import numpy as np
import paddle.distributed as dist
from launched import finish
from paddleformers.trainer import TrainerCallback
from pf_toy import classifier, fresh_names, make_args, make_recorder
from trainer_toy import Reviews, direct_eval, reference_grads, review_data

from dynbatch.integrations.paddleformers import DynamicBatchTrainer

GLOBAL, SAVE, KILL = 8, 3, 5


class KillAt(TrainerCallback):  # type: ignore[misc]
    """``kill -9`` at the end of step :data:`KILL`: checkpoint-SAVE is the newest."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        return control


def real(window: Any) -> list[int]:
    return [
        int(i)
        for idx, pad in zip(window.indices, window.padding, strict=True)
        if not pad
        for i in idx
    ]


def train(out: Path, run: str, *, ranks: int, resume: Any = None, kill: bool = False) -> None:
    ds, dev = Reviews(60), Reviews(23, seed=5)
    rec = make_recorder(grads=1)
    saves = {"save_strategy": "steps", "save_steps": SAVE} if run != "whole" else {}
    args = make_args(out / run, per_device_train_batch_size=GLOBAL // ranks, **saves)
    with fresh_names():
        trainer = DynamicBatchTrainer(
            model=classifier(),
            args=args,
            callbacks=[rec, KillAt()] if kill else [rec],
            time_model=None,
            **review_data(ds, dev),
        )
        trainer.train(resume_from_checkpoint=resume)
    start = trainer.resumed_step or 0
    record: dict[str, Any] = {
        "steps": [[start + k + 1, int(w.epoch), real(w)] for k, w in enumerate(rec.windows)],
        "global_step": int(trainer.state.global_step),
        "planned": trainer.total_steps(),
    }
    if run == "whole":
        gathered: list[Any] = []
        dist.all_gather_object(gathered, real(rec.windows[0]))
        union = np.concatenate(gathered)
        ref = classifier()
        ref.set_state_dict(rec.weights[0])
        record["grad_diff"] = lm_toy.worst(
            rec.grads[0], reference_grads(ref, ds, union, np.ones(union.size))
        )
        metrics = trainer.evaluate()
        record["eval"] = [metrics["eval_accuracy"], metrics["eval_loss"]]
        record["reference"] = list(direct_eval(trainer.model, dev))
    (out / f"{run}-rank{args.dataset_rank}.json").write_text(json.dumps(record))
    if args.dataset_rank == 0:
        np.savez(
            out / f"{run}.npz", **{k: v.numpy() for k, v in trainer.model.state_dict().items()}
        )


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "first":
        train(out, "whole", ranks=2)
        train(out, "killed", ranks=2, kill=True)
    elif mode == "resume":
        train(out, "killed", ranks=2, resume=True)
    else:
        train(out, "rest", ranks=1, resume=str(out / "killed" / f"checkpoint-{SAVE}"))
    finish()  # NOTE [ ending a launched script ]


if __name__ == "__main__":
    main()
