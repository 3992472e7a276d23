"""DynamicBatchTrainer's arguments: what it is made with, refused by name when it is made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")

import dynbatch
from dynbatch.integrations.paddlenlp import (
    STATE_FILE,
    per_sample_cross_entropy,
)

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from test_trainer import make_trainer
from trainer_toy import (
    Reviews,
    make_args,
)

SCRIPTS = Path(__file__).parent / "scripts"


def test_without_paddlenlp_the_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['paddlenlp'] = None  # as if not installed\n"
        "import dynbatch.integrations\n"
        "try:\n"
        "    import dynbatch.integrations.paddlenlp\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install paddlenlp==3.0.0b4" in out.stdout, out.stdout + out.stderr
    assert 'pip install ".[paddlenlp]"' in out.stdout, "the Trainer's own extra, from a clone"


BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"accumulate": "bytes"},
        "accumulate must be one of 'samples', 'tokens'; got accumulate='bytes'",
    ),
    ({"length_fn": len}, "give lengths or a way to measure them"),
    ({"max_cots": 5}, "unknown argument(s) max_cots; the plan options are"),
    ({"plan": {"order": "sideways"}}, "order must be one of"),
    ({"options": dynbatch.PlanOptions(max_cost=99)}, "not both"),
    ({"accumulate_target": 0}, "accumulate_target must be a positive finite number"),
    ({"accumulate_target": 100, "gas": 2}, "accumulate_target (samples or tokens per step), not"),
    ({"epochs": 1.5}, "args.num_train_epochs must be a whole number of epochs >= 1"),
    ({"criterion": object()}, "Or pass loss_fn="),
    ({"loss_fn": "cross_entropy"}, "loss_fn must be a callable"),
    ({"lengths": np.ones(7, dtype=np.int64)}, "lengths has 7 entries but the dataset has 60"),
    ({"eval_lengths": [3, 4]}, "eval_lengths were given without an eval_dataset"),
    (
        {"eval_dataset": Reviews(10, seed=1), "eval_lengths": [3, 4, 5]},
        "eval_lengths has 3 entries but the eval dataset has 10 samples",
    ),
    (
        {"eval_dataset": Reviews(3, seed=1), "eval_lengths": [3, 0, 5]},
        "eval_lengths must be positive; eval_lengths[1]=0",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m[:24] for _, m in BAD])
def test_bad_arguments_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    change = dict(change)
    args = make_args(
        tmp_path,
        gradient_accumulation_steps=change.pop("gas", 1),
        num_train_epochs=change.pop("epochs", 2),
    )
    with pytest.raises(dynbatch.InputError) as info:
        make_trainer(tmp_path, Reviews(60), args=args, **change)
    assert message in str(info.value)


def test_bad_losses_and_checkpoints_are_named(tmp_path: Path) -> None:
    ds = Reviews(60)
    mean_loss = make_trainer(
        tmp_path,
        ds,
        args=make_args(tmp_path, max_steps=1),
        loss_fn=lambda outputs, batch: outputs.mean(),
    )
    with pytest.raises(dynbatch.InputError, match=r"returned one number, a mean .* re-weighted"):
        mean_loss.train()
    for broken, what in (
        (lambda o, b: per_sample_cross_entropy(o, b).detach(), "float32"),
        (lambda o, b: per_sample_cross_entropy(o, b).astype("int64"), "int64"),
    ):
        trainer = make_trainer(tmp_path, ds, args=make_args(tmp_path, max_steps=1), loss_fn=broken)
        with pytest.raises(dynbatch.InputError, match=rf"differentiable float losses.*{what}"):
            trainer.train()
    trainer = make_trainer(tmp_path / "empty", ds, args=make_args(tmp_path / "empty"))
    with pytest.raises(dynbatch.InputError, match="holds no checkpoint"):
        trainer.train(resume_from_checkpoint=True)
    (tmp_path / "stock").mkdir()
    with pytest.raises(dynbatch.InputError, match=f"has no {STATE_FILE}"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "stock"))

    saved = tmp_path / "saved"
    args = make_args(saved, max_steps=1, save_strategy="steps", save_steps=1)
    make_trainer(saved, ds, args=args).train()
    checkpoint = str(saved / "checkpoint-1")
    other_budget = make_trainer(saved, ds, args=args, plan={"max_cost": 5 * 24**2})
    with pytest.raises(dynbatch.InputError, match=r"saved with other options.*max_cost"):
        other_budget.train(resume_from_checkpoint=checkpoint)
    args = make_args(saved, max_steps=1, gradient_accumulation_steps=2)
    with pytest.raises(dynbatch.InputError, match="other optimizer windows"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)
    args = make_args(saved, max_steps=1, save_strategy="steps", save_steps=1)
    state_file = saved / "checkpoint-1" / STATE_FILE
    state = json.loads(state_file.read_text())
    good = state_file.read_text()
    state["sampler"]["num_replicas"] = 2  # as if saved on two cards
    state_file.write_text(json.dumps(state))
    with pytest.raises(dynbatch.InputError, match=r"on num_replicas=2 ranks.*cannot be loaded"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)
    state_file.write_text(good)
    (saved / "checkpoint-1" / STATE_FILE).write_text("{not json")
    with pytest.raises(dynbatch.InputError, match=f"{STATE_FILE} cannot be read"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)


@pytest.mark.parametrize(
    "run", [{"num_train_epochs": 2}, {"max_steps": 5}], ids=["epochs", "steps"]
)
def test_a_plan_with_nothing_to_train_is_refused_at_construction(
    tmp_path: Path, run: dict[str, int]
) -> None:
    ds = Reviews(6)  # every sample fits one batch, which drop_last drops
    with pytest.raises(dynbatch.InputError, match=r"nothing to train: .*drop_last=True"):
        make_trainer(
            tmp_path,
            ds,
            args=make_args(tmp_path, **run),
            plan={"max_cost": 1e9, "drop_last": True},
        )
