"""PaddleFormers' unified checkpoint is refused when the Trainer is made, by name, saying what
to set (NOTE [ PaddleFormers' defaults ] in dynbatch/integrations/paddleformers/adapter.py): the
run took it and failed only at resume, where PaddleFormers' own Trainer fails alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
import lm_toy
from paddleformers.trainer import Trainer
from pf_toy import fresh_names, make_args, tiny_llama

from dynbatch import InputError
from dynbatch.integrations.paddleformers import DynamicBatchTrainer, token_cross_entropy

PLAIN = {"save_checkpoint_format": None, "load_checkpoint_format": None, "save_to_hf": False}


@pytest.mark.parametrize(
    "given",
    [
        {"unified_checkpoint": True, **PLAIN},  # the formats follow the switch
        {"unified_checkpoint": True},  # beside the default flex formats
        {"save_checkpoint_format": "unified_checkpoint", "load_checkpoint_format": None},
        {"load_checkpoint_format": "unified_checkpoint", "save_checkpoint_format": None},
    ],
    ids=["switch", "switch-and-flex", "save-format", "load-format"],
)
def test_a_unified_checkpoint_is_refused_when_the_trainer_is_made(
    tmp_path: Path, given: dict[str, Any]
) -> None:
    ds = lm_toy.Pairs(16, seed=5)
    args = make_args(tmp_path, per_device_train_batch_size=8, max_steps=2, **given)
    with fresh_names(), pytest.raises(InputError) as info:
        DynamicBatchTrainer(
            model=tiny_llama(),
            args=args,
            **lm_toy.pair_data(ds),
            loss_fn=token_cross_entropy,
            time_model=None,
        )
    message = str(info.value)
    assert "unified_checkpoint" in message and "does not resume" in message
    assert "unified_checkpoint=False" in message, "what to set"


def test_paddleformers_own_trainer_does_not_resume_its_unified_checkpoint(tmp_path: Path) -> None:
    """Why the refusal: PaddleFormers 1.2's stock Trainer saves the Llama's weights so that
    its own resume refuses them (transposed shapes). Should a release resume them, this
    fails, and the refusal can go."""
    ds = lm_toy.Pairs(32, seed=5)
    data = lm_toy.pair_data(ds)

    def run(steps: int, resume: bool) -> None:
        args = make_args(
            tmp_path,
            per_device_train_batch_size=8,
            max_steps=steps,
            save_strategy="steps",
            save_steps=2,
            unified_checkpoint=True,
            **PLAIN,
        )
        with fresh_names():
            trainer = Trainer(
                model=tiny_llama(),
                args=args,
                train_dataset=data["train_dataset"],
                data_collator=data["data_collator"],
            )
            trainer.train(resume_from_checkpoint=True if resume else None)

    run(2, resume=False)
    with pytest.raises(RuntimeError, match=r"receives a shape \[32, 64\], but the expected"):
        run(3, resume=True)
