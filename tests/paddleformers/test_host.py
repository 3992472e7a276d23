"""PaddleFormers' own Trainer on one CPU process: the settings it needs, checked by a real run.

NOTE [ paddleformers on one CPU process ]
    paddleformers 1.2.0's ``TrainingArguments`` defaults do not train a float32 model on a
    CPU; each setting below is the one that makes it work, and why:

    * ``amp_master_grad=False``: the default True is refused by ``__post_init__`` unless
      fp16 or bf16 is on (``[ConfigConflict] amp_master_grad``).
    * ``save_checkpoint_format=None, load_checkpoint_format=None``: the default
      ``"flex_checkpoint"`` saves, but its load needs fleet's hybrid group (``'Fleet' object
      has no attribute '_hcg'`` in one process; ``.cuda()`` in its reshard on gloo ranks),
      and it replaces the ``_load_optimizer_and_scheduler`` call a resume makes.
    * ``device="cpu"``: the Trainer never reads it to place the model (a CPU build trains
      on the CPU whatever it says); set so the arguments say what runs.

    On more than one rank, ``sharding=""`` as well: the default ``"stage1"`` with
    ``split_param=True`` asserts ``amp_master_grad``.

    paddle names parameters and optimizer moments from process-wide counters, so a second
    Trainer in one process expects other names than the checkpoint holds; each model is
    built, and each run trained, inside ``paddle.utils.unique_name.guard()``, which starts
    the counters afresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
import paddle
from paddleformers.trainer import Trainer, TrainerCallback, TrainingArguments

#: What paddleformers needs to train and resume on one CPU process
#: (NOTE [ paddleformers on one CPU process ]).
CPU_ARGS: dict[str, Any] = {
    "device": "cpu",
    "amp_master_grad": False,
    "save_checkpoint_format": None,
    "load_checkpoint_format": None,
}


class Tiny(paddle.nn.Layer):
    """A linear classifier returning ``(loss, logits)``, as the Trainer expects."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = paddle.nn.Linear(4, 2)

    def forward(self, x: Any, labels: Any = None) -> Any:
        logits = self.fc(x)
        return paddle.nn.functional.cross_entropy(logits, labels), logits


class Points(paddle.io.Dataset):
    """16 random points with a class each."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(16, 4)).astype("float32")
        self.y = rng.integers(0, 2, size=16).astype("int64")

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "labels": self.y[i]}


class StopAt(TrainerCallback):
    """Stop training after ``step``, as if the run were killed after its checkpoint."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def _trainer(output_dir: Path, callbacks: list[Any] | None = None) -> Any:
    args = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=4,
        per_device_train_batch_size=4,
        save_steps=2,
        learning_rate=0.1,
        seed=1,
        **CPU_ARGS,
    )
    paddle.seed(1)
    with paddle.utils.unique_name.guard():
        model = Tiny()
    return Trainer(model=model, args=args, train_dataset=Points(), callbacks=callbacks)


def _train(trainer: Any, **kwargs: Any) -> Any:
    with paddle.utils.unique_name.guard():
        return trainer.train(**kwargs)


def test_trainer_resumed_from_a_checkpoint_path_ends_where_an_unbroken_run_ends(
    tmp_path: Path,
) -> None:
    """Two steps, a checkpoint, the rest resumed from its path: the weights of a run of four
    steps, so the model, optimizer, scheduler and data position all came back."""
    unbroken = _trainer(tmp_path / "unbroken")
    assert _train(unbroken).global_step == 4

    first = _trainer(tmp_path / "resumed", callbacks=[StopAt(2)])
    assert _train(first).global_step == 2, "stopped after the checkpoint of step 2"
    checkpoint = tmp_path / "resumed" / "checkpoint-2"
    assert (checkpoint / "optimizer.pdopt").is_file(), sorted(p.name for p in checkpoint.iterdir())
    moved = np.abs(first.model.fc.weight.numpy() - unbroken.model.fc.weight.numpy()).max()
    assert moved > 1e-4, "two steps are not four: the comparison below means something"

    second = _trainer(tmp_path / "resumed")
    assert _train(second, resume_from_checkpoint=str(checkpoint)).global_step == 4
    for name, param in unbroken.model.state_dict().items():
        np.testing.assert_allclose(
            second.model.state_dict()[name].numpy(), param.numpy(), rtol=0, atol=1e-6
        )
