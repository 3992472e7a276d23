"""DynamicBatchTrainer with no plan options: the fixed batch's recipe, its measured step time
and the probe that measures it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")
import paddle

import dynbatch
from dynbatch.integrations.core import probe
from dynbatch.integrations.paddlenlp import (
    DynamicBatchTrainer,
)
from dynbatch.plan.epochs import epoch_candidates

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from test_trainer import batches_of, make_trainer, recipe_trainer
from trainer_toy import (
    Reviews,
    collate,
    make_args,
    make_recorder,
    reference_grads,
    tiny_bert,
)

SCRIPTS = Path(__file__).parent / "scripts"


def test_with_no_plan_options_it_trains_like_the_args_batch(tmp_path: Path) -> None:
    """No max_cost: updates of the fixed batch of args, mixed, each the exact mean."""

    ds = Reviews(80)
    rec = make_recorder(grads=2)
    args = make_args(tmp_path, per_device_train_batch_size=6, gradient_accumulation_steps=2, seed=7)
    trainer = recipe_trainer(  # the CPU's split, whatever this CPU's step time
        tmp_path, ds, args, criterion=paddle.nn.CrossEntropyLoss(), callbacks=[rec], time_model=None
    )
    assert trainer.options == dynbatch.like_fixed(ds.lengths, 6, accumulation_steps=2, seed=7)
    sampler = trainer.train_sampler
    assert sampler is not None
    trainer.train()
    expected = sampler.steps_for_epochs(range(2))
    assert rec.optimizer_steps == trainer.state.global_step == expected
    assert abs(expected - 2 * len(ds) / 12) <= 2, "the fixed batch's updates an epoch"
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        assert [w.stop for w in windows] == sampler.epoch_plan(epoch).window_ends.tolist()
        assert sorted(i for idx in batches_of(windows) for i in idx) == list(range(len(ds)))
    assert any(w.stop - w.start > 1 for w in rec.windows), "precondition: several micro-batches"
    for step in range(2):
        window = rec.windows[step]
        indices = np.concatenate(window.indices)
        ref = tiny_bert()
        ref.set_state_dict(rec.weights[step])
        expected_grads = reference_grads(ref, ds, indices, np.ones(indices.size))
        worst = max(float(np.abs(rec.grads[step][n] - g).max()) for n, g in expected_grads.items())
        assert worst < 1e-5, f"step {step}: the mean over the update's samples (criterion)"


def test_the_plan_takes_args_seed_and_resume_takes_text(tmp_path: Path) -> None:
    ds = Reviews(40)
    trainer = make_trainer(tmp_path, ds, args=make_args(tmp_path, seed=11))
    assert trainer.options.seed == 11, "args.seed, when the plan options name none"
    assert make_trainer(tmp_path, ds, plan={"seed": 3}).options.seed == 3, "an explicit seed"
    for text in ("True", "true"):  # --resume_from_checkpoint True arrives as text
        with pytest.raises(dynbatch.InputError, match="holds no checkpoint"):
            trainer.train(resume_from_checkpoint=text)


def test_the_recipe_measures_the_step_time_follows_it_and_keeps_it(tmp_path: Path) -> None:
    """NOTE [ the Trainer measures the step time ]: probe, plan by it, read it back on resume."""
    ds = Reviews(80)
    args = make_args(tmp_path, per_device_train_batch_size=6, seed=7)
    model = tiny_bert()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    trainer = DynamicBatchTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        time_model="measure",  # the default measures on an accelerator only
    )
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k].numpy()) for k in before), "weights put back"
    saved = json.loads((Path(args.output_dir) / probe.TIME_MODEL_FILE).read_text())
    measured = dynbatch.StepTimeModel(**saved)
    assert measured.c + measured.a + measured.b > 0, "a step takes time"
    assert trainer.options == dynbatch.like_fixed(ds.lengths, 6, seed=7, time_model=measured)
    again = recipe_trainer(tmp_path, ds, args, time_model="measure")  # read back, not probed
    assert again.options == trainer.options, "a resume plans the same batches"
    given = recipe_trainer(tmp_path, ds, make_args(tmp_path / "b", seed=7), time_model="0,1,0")
    assert given.options == dynbatch.like_fixed(ds.lengths, 8, seed=7, time_model="0,1,0")
    assert not (tmp_path / "b" / probe.TIME_MODEL_FILE).exists(), "given: no probe"
    with pytest.raises(dynbatch.InputError, match="time_model= is for the fixed batch's recipe"):
        make_trainer(tmp_path, ds, time_model="0,1,0")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"accumulate": "tokens", "time_model": "0,1,0"}, "accumulate='tokens'"),
        ({"accumulate": "tokens", "time_model": "fast"}, "time_model='fast'"),
        ({"time_model": "Measure"}, "'measure'"),
        ({"time_model": True}, "'measure'"),
    ],
)
def test_a_time_model_it_cannot_follow_or_read_is_refused_naming_what_is_valid(
    tmp_path: Path, kw: dict[str, Any], match: str
) -> None:
    """Under accumulate='tokens' the recipe keeps its split: a time model there was dropped
    without a word, even one that is no time model at all."""
    with pytest.raises(dynbatch.InputError, match=match):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), **kw)


def test_plan_options_with_no_time_model_are_taken(tmp_path: Path) -> None:
    """time_model=None says "no step time": nothing to drop when the options plan on their own."""
    ds = Reviews(20)
    trainer = make_trainer(tmp_path, ds, time_model=None)
    assert trainer.options.time_model is None
    assert trainer.options == make_trainer(tmp_path, ds).options


def test_the_probe_leaves_the_random_stream_as_it_found_it(tmp_path: Path) -> None:
    """A run that probes and one that reads the step time back (same seed) train alike: the
    probe's dropout must not move paddle's random stream."""

    ds = Reviews(40)
    draws = []
    for out, time_model in ((tmp_path / "probed", "measure"), (tmp_path / "given", "0.01,0,0")):
        DynamicBatchTrainer(
            model=tiny_bert(dropout=0.1),
            args=make_args(out),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            time_model=time_model,
        )
        draws.append(paddle.rand([4]).numpy())
    assert (tmp_path / "probed" / probe.TIME_MODEL_FILE).exists(), "precondition"
    assert np.array_equal(draws[0], draws[1]), "the same draws after the probe as without it"


def test_the_probe_leaves_paddles_names_as_it_found_them(tmp_path: Path) -> None:
    """paddle names an optimizer's accumulators by a process-wide counter, and a checkpoint
    keeps those names: a probe whose own optimizer moved it saved ``..._moment1_1`` where a
    resumed run, which reads the step time back, looked for ``..._moment1_0`` (its resume
    failed with "Optimizer set error"). Each run here starts from fresh names, as a process
    does."""
    from paddle.utils import unique_name

    ds = Reviews(40)
    names = []
    for out, time_model in ((tmp_path / "probed", "measure"), (tmp_path / "given", "0.01,0,0")):
        with unique_name.guard():
            trainer = recipe_trainer(out, ds, make_args(out), time_model=time_model)
            first = trainer.model.parameters()[0].name
            names.append(unique_name.generate(f"{first}_moment1"))
    assert (tmp_path / "probed" / probe.TIME_MODEL_FILE).exists(), "precondition"
    assert names[0] == names[1], "the optimizer's accumulators get the names a resume expects"


def test_the_log_says_once_which_split_the_step_time_chose_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user whose updates stay whole (or are cut) learns why from the log: the step time and
    the predicted epoch of each split, at info level, once."""
    import logging

    from dynbatch.plan.steptime import check_time_model

    ds = Reviews(80)
    for i, time_model in enumerate(("0.05,0,0", "0,1e-5,1e-6")):  # a fixed cost a step; none
        caplog.clear()
        with caplog.at_level(logging.INFO):
            args = make_args(tmp_path / str(i))
            trainer = recipe_trainer(tmp_path, ds, args, time_model=time_model)
        lines = [r.getMessage() for r in caplog.records if " s an epoch " in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"dynbatch: step time {check_time_model(time_model)}: ")
        plan = trainer.train_sampler.epoch_plan(0)
        updates = len(plan.window_ends)
        assert f"{plan.num_steps} micro-batch(es) a rank for {updates} update(s)" in lines[0]
        _, seconds = epoch_candidates(
            trainer.train_sampler.lengths, trainer.options, 0, 1, trainer.train_sampler.loss_tokens
        )
        names = {
            "time split": "whole updates cut at the step time",
            "padding-free": "the padding-free split",
        }
        kept = min(seconds, key=lambda k: (seconds[k], k != "padding-free"))  # a tie: free
        other = next(k for k in seconds if k != kept)
        assert f"planning {names[kept]} for epoch 0: predicted {seconds[kept]:.3g} s" in lines[0]
        assert f"against {seconds[other]:.3g} s for {names[other]}" in lines[0], lines[0]
        if i == 0:  # every cut costs a whole step: none pays
            assert plan.num_steps == updates and "each update whole" in lines[0], lines[0]


def test_a_torn_kept_step_time_is_named_never_half_read(tmp_path: Path) -> None:
    """NOTE [ atomic writes ]: the step time kept in output_dir, cut short or garbled, is an
    InputError naming the file and saying to delete it to measure again."""
    path = tmp_path / probe.TIME_MODEL_FILE
    whole = json.dumps({"c": 0.01, "a": 0.001, "b": 0.0, "error": 0.1})
    beyond_float = '{"c": 1' + "0" * 400 + ', "a": 0, "b": 0}'  # was a bare OverflowError
    inf_steps = '{"c": 1e308, "a": 1e308, "b": 1e308}'  # was named as an argument never passed
    for text in (
        whole[: len(whole) // 2],
        "",
        whole[:-1],
        '{"c": 0.01}',
        "[1, 2]",
        beyond_float,
        inf_steps,
    ):
        path.write_text(text)
        with pytest.raises(dynbatch.InputError, match=rf"{path.name}.*delete it"):
            recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    path.unlink()
    path.mkdir()  # was a whole probe, then a bare IsADirectoryError on writing the result
    with pytest.raises(dynbatch.InputError, match=rf"{path.name}.* not a file"):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    path.rmdir()
    path.write_text(whole)
    trainer = recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    assert trainer.options.time_model in (None, dynbatch.StepTimeModel(**json.loads(whole)))


def test_the_probe_takes_the_batches_training_takes(tmp_path: Path) -> None:
    """A collator's list field (the DataLoader passes it on as a list) trains, so it probes;
    one that returns no dict is refused as training refuses it, not with an AttributeError."""

    def labels_as_list(samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {**collate(samples), "labels": collate(samples)["labels"].tolist()}

    ds = Reviews(30)
    trainer = recipe_trainer(
        tmp_path / "list",
        ds,
        make_args(tmp_path / "list"),
        data_collator=labels_as_list,
        time_model="measure",
    )
    assert (tmp_path / "list" / probe.TIME_MODEL_FILE).exists()
    assert trainer.train().global_step > 0

    def as_tuple(samples: list[dict[str, Any]]) -> tuple[Any, Any]:
        batch = collate(samples)
        return batch["input_ids"], batch["labels"]

    with pytest.raises(dynbatch.InputTypeError, match="data_collator must return a dict"):
        recipe_trainer(
            tmp_path / "tuple",
            ds,
            make_args(tmp_path / "tuple"),
            data_collator=as_tuple,
            time_model="measure",
        )


def test_a_probe_batch_keeps_real_values_at_any_shape() -> None:

    base = {
        "input_ids": paddle.to_tensor([[5, 6, 7], [8, 9, 0]]),
        "labels": paddle.to_tensor([1, 0]),
    }
    out = probe.probe_batch(base, 5, 2)
    assert out["input_ids"].shape == [5, 2] and out["labels"].shape == [5]
    assert out["input_ids"].numpy().tolist()[:3] == [[5, 6], [8, 9], [5, 6]]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"criterion": object()}, "criterion must be a loss layer with a reduction"),
        ({"accumulate_target": 10.0}, "the plan makes its own updates"),
    ],
)
def test_the_recipe_refuses_what_it_cannot_honour(
    tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(dynbatch.InputError, match=message):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), **kw)
    with pytest.raises(dynbatch.InputError, match="group them again"):
        make_trainer(
            tmp_path,
            Reviews(20),
            args=make_args(tmp_path, gradient_accumulation_steps=2),
            plan={"update_size": 8},
        )
