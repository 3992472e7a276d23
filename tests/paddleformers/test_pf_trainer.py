"""DynamicBatchTrainer on PaddleFormers' own Trainer, one CPU process, real DataLoaders: the
fixed batch's recipe and its exact means, evaluation on dynamic batches, the log lines, the step
time measured or given, token losses, and packing for PaddleFormers' LlamaForCausalLM with
FlashMask's start/end rows (NOTE [ the causal LM of the PaddleFormers tests ] in pf_toy.py says
where Qwen2ForCausalLM would go). The references are the paddlenlp tests' (tests/scripts)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
import lm_toy
import paddle
from paddleformers.utils.masking_utils import _gen_from_sparse_attn_mask_indices
from pf_toy import classifier, fresh_names, make_args, make_recorder, tiny_llama
from trainer_toy import PLAN, Reviews, direct_eval, mean_gap, review_data

import dynbatch
from dynbatch.integrations.core import probe
from dynbatch.integrations.paddleformers import STATE_FILE, DynamicBatchTrainer, token_cross_entropy
from dynbatch.integrations.paddleformers.adapter import PADDLEFORMERS


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """PaddleFormers' log records (its logger does not propagate to the root's)."""
    monkeypatch.setattr(PADDLEFORMERS.logger.logger, "propagate", True)
    with caplog.at_level(logging.INFO):
        yield caplog


def said(logs: Any, start: str) -> list[str]:
    return [r.getMessage() for r in logs.records if r.getMessage().startswith(start)]


def batches_of(windows: list[Any]) -> list[list[int]]:
    return [idx.tolist() for w in windows for idx in w.indices]


def test_the_recipe_trains_the_fixed_batchs_updates_each_the_exact_mean_evaluated_and_logged(
    tmp_path: Path, logs: Any
) -> None:
    """No plan options: updates of ``per_device_train_batch_size x gradient_accumulation_steps``
    with lengths mixed, the fixed batch's count an epoch, each the mean over its samples;
    evaluation on dynamic batches gives the whole set's accuracy and loss; each step's log
    has the plan's numbers."""
    ds, dev = Reviews(60), Reviews(23, seed=5)
    rec = make_recorder(grads=2)
    args = make_args(
        tmp_path,
        per_device_train_batch_size=6,
        gradient_accumulation_steps=2,
        seed=7,
        evaluation_strategy="epoch",
    )
    with fresh_names():
        trainer = DynamicBatchTrainer(
            model=classifier(), args=args, callbacks=[rec], time_model=None, **review_data(ds, dev)
        )
        assert trainer.options == dynbatch.like_fixed(ds.lengths, 6, accumulation_steps=2, seed=7)
        sampler = trainer.train_sampler
        assert sampler is not None
        trainer.train()
    expected = sampler.steps_for_epochs(range(2))
    assert rec.optimizer_steps == trainer.state.global_step == trainer.state.max_steps == expected
    assert abs(expected - 2 * len(ds) / 12) <= 2, "the fixed batch's updates an epoch"
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        assert [w.stop for w in windows] == sampler.epoch_plan(epoch).window_ends.tolist()
        seen = sorted(i for idx in batches_of(windows) for i in idx)
        assert seen == list(range(len(ds))), f"epoch {epoch}: every sample exactly once"
    assert all(w.stop - w.start > 1 for w in rec.windows[:2]), "precondition: micro-batches"
    for step in range(2):
        assert mean_gap(rec, step, ds, classifier()) < 1e-5, f"step {step}: the update's mean"

    steps = [log for log in rec.logs if "loss" in log]
    assert len(steps) == expected
    for key in ("batch_size", "padding_efficiency", "cost_ratio", "tokens_per_sec"):
        assert all(log[key] > 0 for log in steps), key
    assert sum(log["samples_per_step"] for log in steps) == 2 * len(ds), "real samples"
    assert steps[-1]["progress_or_epoch"] == 2.0, "state.epoch counts real epochs"
    (planned,) = said(logs, f"dynbatch: {expected} optimizer steps (2 epoch(s) of ")
    assert "its loss the mean over its samples" in planned, planned
    evals = [log for log in rec.logs if "eval_accuracy" in log]
    assert [log["progress_or_epoch"] for log in evals] == [1.0, 2.0], "one eval per real epoch"
    acc, loss = direct_eval(trainer.model, dev)
    assert evals[-1]["eval_accuracy"] == acc, "dynamic eval batches, the whole set's accuracy"
    assert evals[-1]["eval_loss"] == pytest.approx(loss, abs=1e-5)


@pytest.mark.parametrize(
    ("accumulate", "gas", "target"), [("samples", 2, None), ("tokens", 1, 150.0)]
)
def test_a_step_of_unequal_micro_batches_is_the_mean_over_its_samples_or_tokens(
    tmp_path: Path, accumulate: str, gas: int, target: float | None
) -> None:
    """Plan options (a quadratic budget): micro-batches of unequal sizes, two to a step or as
    many as hold 150 tokens; the step's gradient is the mean over its samples or tokens."""
    ds = Reviews(60)
    rec = make_recorder(grads=3)
    with fresh_names():
        DynamicBatchTrainer(
            model=classifier(),
            args=make_args(tmp_path, gradient_accumulation_steps=gas, max_steps=3),
            **review_data(ds),
            accumulate=accumulate,
            accumulate_target=target,
            callbacks=[rec],
            **PLAN,
        ).train()
    assert any(len({i.size for i in w.indices}) > 1 for w in rec.windows), (
        "precondition: micro-batches of unequal size in one step"
    )
    for step, window in enumerate(rec.windows[:3]):
        indices = np.concatenate(window.indices)
        counted = ds.lengths[indices].sum() if accumulate == "tokens" else indices.size
        assert window.count == counted, "the window's count is its samples or tokens"
        assert mean_gap(rec, step, ds, classifier(), accumulate) < 1e-5, f"step {step}: the mean"


def test_the_step_time_measured_or_given_plans_the_fixed_batchs_updates(
    tmp_path: Path, logs: Any
) -> None:
    """time_model="measure" probes the model (weights put back), keeps the step time in
    output_dir and plans by it; a given one is planned by as given, and the log says which
    split it chose. Either way the updates are the fixed batch's."""
    ds = Reviews(60)
    args = make_args(tmp_path / "measured", per_device_train_batch_size=6, seed=7)
    with fresh_names():
        model = classifier()
        before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        measured = DynamicBatchTrainer(
            model=model, args=args, time_model="measure", **review_data(ds)
        )
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k].numpy()) for k in before), "weights put back"
    kept = dynbatch.StepTimeModel(
        **json.loads((tmp_path / "measured" / probe.TIME_MODEL_FILE).read_text())
    )
    assert kept.c + kept.a + kept.b > 0, "a step takes time"
    assert measured.options == dynbatch.like_fixed(ds.lengths, 6, seed=7, time_model=kept)
    assert said(logs, "dynbatch: step time measured on cpu in ")
    with fresh_names():
        measured.train()
    fixed = dynbatch.like_fixed(ds.lengths, 6, seed=7)
    plain = dynbatch.DistributedDynamicBatchSampler(ds, lengths=ds.lengths, options=fixed)
    assert measured.state.global_step == plain.steps_for_epochs(range(2)), "the fixed updates"

    time_model = "0.05,1e-5,1e-4"
    logs.clear()
    with fresh_names():
        given = DynamicBatchTrainer(
            model=classifier(),
            args=make_args(tmp_path / "given", per_device_train_batch_size=6, seed=7),
            time_model=time_model,
            **review_data(ds),
        )
    assert given.options == dynbatch.like_fixed(ds.lengths, 6, seed=7, time_model=time_model)
    assert not (tmp_path / "given" / probe.TIME_MODEL_FILE).exists(), "given: no probe"
    (line,) = [m for m in said(logs, "dynbatch: step time ") if " s an epoch " in m]
    assert "for epoch 0: predicted" in line, line
    assert given.total_steps() == plain.steps_for_epochs(range(2)), "the fixed updates"


def packed_rows(window: Any) -> bool:
    """Whether ``window`` spans several micro-batches and some row holds several samples."""
    return window.stop - window.start > 1 and max(idx.size for idx in window.indices) > 1


@pytest.mark.parametrize("packed", [False, True], ids=["token-losses", "packed"])
def test_a_causal_lm_update_is_the_mean_over_its_loss_tokens(tmp_path: Path, packed: bool) -> None:
    """PaddleFormers' LlamaForCausalLM: updates cut on loss tokens (masked prompts count none),
    or the fixed batch's updates packed into rows of 64 tokens with FlashMask's start/end rows;
    each update's gradient is the mean over every loss token of its samples, padded, in one
    forward and backward."""
    ds = lm_toy.Pairs(48, seed=3)
    rec = make_recorder(grads=2)
    way: dict[str, Any] = (
        {"pack_len": 64, "max_batch_size": 1}  # one row a micro-batch
        if packed
        else {"loss_tokens": ds.loss_tokens, "accumulate": "tokens", "loss_fn": token_cross_entropy}
    )
    with fresh_names():
        trainer = DynamicBatchTrainer(
            model=tiny_llama(),
            args=make_args(tmp_path, per_device_train_batch_size=8, max_steps=2),
            **lm_toy.pair_data(ds),
            callbacks=[rec],
            time_model=None,
            **way,
        )
        trainer.train()
    windows = rec.windows[:2]
    if packed:
        assert trainer.loss_fn.func is token_cross_entropy, "a causal LM packs with the token loss"
        assert any(packed_rows(w) for w in windows), "precondition: rows of several samples"
        rows = trainer.train_collator([ds[int(i)] for i in windows[0].indices[0]])
        assert sorted(rows) == [
            "attn_mask_startend_row_indices",
            "input_ids",
            "labels",
            "position_ids",
        ]
        startend = rows["attn_mask_startend_row_indices"]
        assert startend.dtype == np.int32 and startend.shape == (
            *rows["input_ids"].shape[:1],
            1,
            rows["input_ids"].shape[1],
            1,
        )
    else:
        assert all(w.count == ds.loss_tokens[np.concatenate(w.indices)].sum() for w in windows)
        assert any(w.stop - w.start > 1 for w in windows), "precondition: several micro-batches"
    for step in range(2):
        ref = tiny_llama()
        ref.set_state_dict(rec.weights[step])
        expected = lm_toy.reference_grads(ref, ds, np.concatenate(windows[step].indices))
        worst = lm_toy.worst(rec.grads[step], expected)
        assert worst < 1e-5 * max(1.0, lm_toy.scale(expected)), f"step {step}: {worst}"


def test_the_packed_rows_mask_is_paddleformers_flashmask_form_and_eager_honours_it() -> None:
    """PackCollator's causal attn_mask_startend_row_indices, as PaddleFormers' attention reads
    it, is the block mask: int32 [R, 1, P, 1], each real column the exclusive end of its
    sample (PaddleFormers' own collator's values); a fill column k holds k + 1, where
    PaddleFormers' collator writes k, so a fill token attends to itself and no softmax row is
    empty. Eager attention gives each sample's logits as alone; sdpa does not, which is why
    packing refuses it (NOTE [ PaddleFormers' attention and the packed mask ])."""
    rng = np.random.default_rng(0)
    samples = [{"input_ids": rng.integers(1, lm_toy.VOCAB, n)} for n in (5, 3, 6)]
    rows = dynbatch.PackCollator(8, return_mask=True, return_startend=True)(samples)
    startend, dense = rows["attn_mask_startend_row_indices"], rows["attention_mask"]
    assert startend.dtype == np.int32 and startend.shape == (2, 1, 8, 1), "the fullest row's"
    assert startend[0, 0, :, 0].tolist() == [5, 5, 5, 5, 5, 8, 8, 8], "each sample's end"
    assert startend[1, 0, :, 0].tolist() == [6] * 6 + [7, 8], "fill: k + 1"
    decoded = _gen_from_sparse_attn_mask_indices(paddle.to_tensor(startend), paddle.float32, True)
    assert np.array_equal(decoded.numpy()[:, 0] == 0, dense), "PaddleFormers reads the block mask"

    ids, positions = paddle.to_tensor(rows["input_ids"]), paddle.to_tensor(rows["position_ids"])
    for attention, honoured in (("eager", True), ("sdpa", False)):
        with fresh_names():
            model = tiny_llama(attention=attention)
        model.eval()
        with paddle.no_grad():
            packed = model(
                input_ids=ids,
                position_ids=positions,
                attn_mask_startend_row_indices=paddle.to_tensor(startend),
            )[0].numpy()
            alone = [
                model(input_ids=paddle.to_tensor(s["input_ids"][None]))[0].numpy()[0]
                for s in samples
            ]
        got = [packed[0, :5], packed[0, 5:8], packed[1, :6]]
        apart = max(float(np.abs(g - a).max()) for g, a in zip(got, alone, strict=True))
        assert (apart < 1e-5) == honoured, f"{attention}: {apart}"


def test_a_checkpoint_whose_two_states_disagree_names_paddleformers_state_file(
    tmp_path: Path,
) -> None:
    """PaddleFormers keeps the Trainer's state in trainer_state.bin, not paddlenlp's .json."""
    ds = Reviews(40)

    def run(**kw: Any) -> Any:
        with fresh_names():
            made = DynamicBatchTrainer(
                model=classifier(),
                args=make_args(tmp_path, save_strategy="steps", save_steps=2),
                time_model=None,
                callbacks=[make_recorder(stop_at=2)],
                **review_data(ds),
            )
            return made.train(**kw)

    run()
    state = tmp_path / "checkpoint-2" / STATE_FILE
    saved = json.loads(state.read_text())
    state.write_text(json.dumps({**saved, "global_step": 1}))
    with pytest.raises(
        dynbatch.InputError,
        match=(f"the checkpoint's trainer_state.bin says global_step=2, its {STATE_FILE} says 1"),
    ):
        run(resume_from_checkpoint=True)
    state.write_text(json.dumps(saved))
    (tmp_path / "checkpoint-2" / "trainer_state.bin").unlink()  # an outside tester's case
    with pytest.raises(
        dynbatch.InputError,
        match=(
            "the checkpoint's trainer_state.bin is missing or says global_step=0, its "
            f"{STATE_FILE} says 2"
        ),
    ):
        run(resume_from_checkpoint=True)


def test_a_llama_run_resumes_from_its_checkpoint_with_paddleformers_default_save_to_hf(
    tmp_path: Path,
) -> None:
    """The example engineer's finding: with PaddleFormers' default ``save_to_hf=True`` a
    ``PretrainedModel``'s checkpoint holds ``model.safetensors``, which its resume does not
    read (it looks for ``model_state.pdparams``): ``resume_from_checkpoint=True`` failed."""
    ds = lm_toy.Pairs(32, seed=5)

    def run(steps: int, resume: bool) -> Any:
        with fresh_names():
            trainer = DynamicBatchTrainer(
                model=tiny_llama(),
                args=make_args(
                    tmp_path,
                    per_device_train_batch_size=8,
                    max_steps=steps,
                    save_strategy="steps",
                    save_steps=2,
                ),
                **lm_toy.pair_data(ds),
                loss_fn=token_cross_entropy,
                time_model=None,
            )
            trainer.train(resume_from_checkpoint=True if resume else None)
            return trainer

    run(2, resume=False)
    resumed = run(3, resume=True)
    assert int(resumed.state.global_step) == 3
