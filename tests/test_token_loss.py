"""Training on token-level losses (issue: fine-tuning language models on dynamic batches).

Plans whose updates count loss tokens, and the exact per-token mean of an update over
micro-batches of different lengths and prompt shares, with a real paddlenlp causal LM, in
the hand loop and in the Trainer, on 1 rank here and on 2 in tests/test_distributed.py-style
launches. The loss itself (``token_loss``, ``loss_token_counts``) is in tests/test_losses.py.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch import InputError

pytest.importorskip("paddlenlp")  # the causal LM

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from lm_toy import (
    Pairs,
    collate,
    lm_trainer,
    logits_of,
    reference_grads,
    scale,
    stock_grads,
    tiny_lm,
    worst,
)


# -- plans that count loss tokens --------------------------------------------------------------
def test_token_updates_count_loss_tokens_and_micro_batches_full_tokens() -> None:
    ds = Pairs(200, seed=1)
    opts = dynbatch.like_fixed(
        ds.lengths, 16, update_unit="tokens", loss_tokens=ds.loss_tokens, seed=2
    )
    assert opts.update_size == pytest.approx(16 * ds.loss_tokens.mean())
    plain = dynbatch.like_fixed(ds.lengths, 16, update_unit="tokens", seed=2)
    assert plain.update_size == pytest.approx(16 * ds.lengths.mean())
    assert opts.max_cost == plain.max_cost and opts.cost == plain.cost, (
        "the cost still plans on full lengths"
    )
    flat = SimpleNamespace(c=0.01, a=0.0, b=0.0)
    filled = dynbatch.fill_device(
        ds.lengths,
        flat,
        max_cost=1e9,
        cost="linear",
        batch_size=16,
        update_unit="tokens",
        loss_tokens=ds.loss_tokens,
    )
    assert filled.update_size == opts.update_size, "fill_device counts loss tokens alike"
    sp = dynbatch.plan_epoch(ds.lengths, opts, 0, loss_tokens=ds.loss_tokens)
    ends = np.r_[0, sp.window_ends]
    steps = list(sp.plan)  # one rank: a batch per step
    per_update = [
        ds.loss_tokens[np.concatenate(steps[a:b])].sum() for a, b in itertools.pairwise(ends)
    ]
    assert abs(len(per_update) - len(ds) / 16) <= 1, "the fixed batch's number of updates"
    assert np.mean(per_update) == pytest.approx(opts.update_size, rel=0.1)


def test_loss_tokens_are_checked_and_part_of_the_resume_state() -> None:
    ds = Pairs(40, seed=2)
    with pytest.raises(InputError, match=r"loss_tokens\[3\]=.* more than the sample's length"):
        bad = ds.loss_tokens.copy()
        bad[3] = ds.lengths[3] + 1
        dynbatch.DynamicBatchSampler(lengths=ds.lengths, loss_tokens=bad, batch_size=8)
    with pytest.raises(InputError, match="loss_tokens has 39 entries but lengths has 40"):
        dynbatch.DynamicBatchSampler(
            lengths=ds.lengths, loss_tokens=ds.loss_tokens[:-1], batch_size=8
        )
    with pytest.raises(InputError, match="no token carries a loss"):
        dynbatch.like_fixed(
            ds.lengths, 8, update_unit="tokens", loss_tokens=np.zeros(40, dtype=int)
        )
    kw: dict[str, Any] = {"lengths": ds.lengths, "batch_size": 8, "update_unit": "tokens"}
    state = dynbatch.DynamicBatchSampler(loss_tokens=ds.loss_tokens, **kw).state_dict()
    other = dynbatch.DynamicBatchSampler(loss_tokens=np.maximum(ds.loss_tokens - 1, 0), **kw)
    with pytest.raises(InputError, match="saved for different lengths or loss_tokens"):
        other.load_state_dict(state)
    dynbatch.DynamicBatchSampler(loss_tokens=ds.loss_tokens, **kw).load_state_dict(state)


# -- the exact per-token mean: the hand loop ---------------------------------------------------
class SpySGD(paddle.optimizer.SGD):  # type: ignore[misc]
    """SGD that keeps the gradients of each step it takes, and the weights before it."""

    def __init__(self, model: Any, lr: float = 0.5) -> None:
        super().__init__(lr, parameters=model.parameters())
        self.model = model
        self.grads: list[dict[str, np.ndarray]] = []
        self.before: list[dict[str, np.ndarray]] = []

    def step(self) -> None:
        named = self.model.named_parameters()
        pairs = [(n, p) for n, p in named if p.grad is not None]
        self.grads.append({n: p.grad.numpy().copy() for n, p in pairs})
        self.before.append({k: v.numpy().copy() for k, v in self.model.state_dict().items()})
        super().step()


def hand_loop(ds: Pairs, sampler: Any, model: Any, steps: int) -> tuple[SpySGD, list[Any]]:
    """Train until ``steps`` updates; each micro-batch's (loss_sum, count) from token_loss."""
    opt = SpySGD(model)
    acc = dynbatch.GradientAccumulator(model, opt, sampler=sampler)
    trained: list[np.ndarray] = []
    for idx in sampler:
        batch = collate([ds[i] for i in idx])
        with acc.accumulate():
            logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
            loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"]))
            acc.backward(loss_sum, count=count)
        trained.append(np.asarray(idx))
        if acc.optimizer_steps == steps:
            break
    return opt, trained


@pytest.mark.parametrize("unit", ["tokens", "samples"])
def test_hand_loop_update_is_the_exact_mean_over_its_loss_tokens(unit: str) -> None:
    ds = Pairs(64, seed=5)
    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, loss_tokens=ds.loss_tokens, batch_size=16, update_unit=unit
    )
    opt, trained = hand_loop(ds, sampler, tiny_lm(), steps=2)
    ends = np.r_[0, sampler.epoch_plan().window_ends[:2]]
    for step, (a, b) in enumerate(itertools.pairwise(ends)):
        micro = trained[a:b]
        tokens = {int(ds.loss_tokens[m].sum()) for m in micro}
        assert len(micro) > 1 and len(tokens) > 1, "precondition: unequal loss tokens per part"
        shares = [ds.loss_tokens[m].sum() / ds.lengths[m].sum() for m in micro]
        assert max(shares) - min(shares) > 0.02, "precondition: unequal prompt shares"
        ref = tiny_lm()
        ref.set_state_dict(opt.before[step])
        expected = reference_grads(ref, ds, np.concatenate(micro))
        assert worst(opt.grads[step], expected) < 1e-5 * max(1.0, scale(expected)), (
            f"step {step}: the update is the mean over all its loss tokens"
        )
        stock = stock_grads(ref, ds, micro)
        off = worst(stock, expected) / scale(expected)
        print(f"step {step}: the per-micro-batch mean is off by {off:.1%} of the largest gradient")
        assert off > 1e-3, "the stock per-micro-batch mean is a different update"


def test_steps_for_epochs_equals_the_steps_taken_with_loss_token_windows() -> None:
    ds = Pairs(48, seed=6)
    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, loss_tokens=ds.loss_tokens, batch_size=8, update_unit="tokens"
    )
    planned = sampler.steps_for_epochs(range(2))
    model = tiny_lm()
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    acc = dynbatch.GradientAccumulator(model, opt, sampler=sampler)
    assert acc.steps_for_epochs(range(2)) == planned
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for idx in sampler:
            batch = collate([ds[i] for i in idx])
            with acc.accumulate():
                logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
                acc.backward(*dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"])))
    assert acc.optimizer_steps + acc.skipped_steps == planned
    assert abs(planned - 2 * len(ds) / 8) <= 2, "the fixed batch's updates, per epoch"


# -- the exact per-token mean: the Trainer -----------------------------------------------------
@pytest.mark.parametrize("labels_to_model", [False, True])
def test_trainer_update_is_the_exact_mean_over_its_loss_tokens(
    tmp_path: Path, labels_to_model: bool
) -> None:
    from trainer_toy import make_recorder

    ds = Pairs(64, seed=7)
    rec = make_recorder(grads=2)
    trainer = lm_trainer(
        tmp_path, ds, args={"max_steps": 2}, callbacks=[rec], labels_to_model=labels_to_model
    )
    trainer.train()
    for step, window in enumerate(rec.windows[:2]):
        indices = np.concatenate(window.indices)
        assert len(window.indices) > 1, "precondition: an update of several micro-batches"
        assert window.count == ds.loss_tokens[indices].sum(), "the plan counts loss tokens"
        ref = tiny_lm()
        ref.set_state_dict(rec.weights[step])
        expected = reference_grads(ref, ds, indices)
        assert worst(rec.grads[step], expected) < 1e-5 * max(1.0, scale(expected))
        stock = stock_grads(ref, ds, list(window.indices))
        assert worst(stock, expected) / scale(expected) > 1e-3


@pytest.mark.parametrize("accumulate", ["samples", "tokens"])
def test_the_trainers_log_says_a_token_loss_averages_over_loss_tokens(
    tmp_path: Path, accumulate: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Updates of 16 pairs, each the per-token mean of token_cross_entropy: the log said "the
    mean over its samples"."""
    import logging

    trainer = lm_trainer(tmp_path, Pairs(32, seed=3), accumulate=accumulate, time_model=None)
    with caplog.at_level(logging.INFO):
        trainer.get_train_dataloader()
    line = next(r.getMessage() for r in caplog.records if "optimizer steps (" in r.getMessage())
    assert "its loss the per-token mean over its loss tokens (the count token_cross_entropy" in (
        line
    ), line
    assert "mean over its samples" not in line and "mean over its tokens" not in line, line


def test_trainer_refuses_a_mean_and_loss_tokens_that_disagree(tmp_path: Path) -> None:
    ds = Pairs(32, seed=8)

    def model_loss(outputs: Any, batch: Any) -> Any:
        return outputs[0]  # the model's own loss, given labels_to_model: a mean

    trainer = lm_trainer(tmp_path, ds, args={"max_steps": 1}, loss_fn=model_loss)
    trainer.labels_to_model = True
    with pytest.raises(InputError, match=r"a mean .* cannot be re-weighted"):
        trainer.train()

    every_token = ds.lengths - 1  # a wrong count: as if no prompt were masked
    trainer = lm_trainer(tmp_path, ds, args={"max_steps": 1}, loss_tokens=every_token)
    with pytest.raises(RuntimeError, match="do loss_tokens count the tokens loss_fn counts"):
        trainer.train()


def test_trainer_evaluates_the_per_token_mean(tmp_path: Path) -> None:
    ds, dev = Pairs(32, seed=9), Pairs(20, seed=10)
    trainer = lm_trainer(
        tmp_path, ds, args={"max_steps": 1}, eval_dataset=dev, eval_lengths=dev.lengths
    )
    metrics = trainer.evaluate()
    batch = collate([dev[i] for i in range(len(dev))])
    model = trainer.model
    model.eval()
    with paddle.no_grad():
        logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
        total, count = dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"]))
    assert metrics["eval_loss"] == pytest.approx(float(total) / int(count), rel=1e-5)


# -- 2 ranks and resume: real processes --------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("runner", ["loop", "trainer"])
def test_two_ranks_update_is_the_exact_mean_over_all_loss_tokens(
    tmp_path: Path, runner: str
) -> None:
    from test_distributed import launch

    launch("lm_grad.py", tmp_path, str(tmp_path), runner)
    ranks = [json.loads((tmp_path / f"lm_grad{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["micro_batches"] > 1 and r["loss_tokens"] > 0
        assert r["max_abs_diff"] < 1e-5 * max(1.0, r["scale"]), (
            "the update is the mean over every loss token of both ranks"
        )
        assert r["stock_diff"] > 1e-3 * r["scale"], "the per-micro-batch mean differs"
    assert ranks[0]["loss_tokens"] == ranks[1]["loss_tokens"], "one window, counted over ranks"


@pytest.mark.parametrize(
    ("count", "shown"),
    [(None, "None"), (paddle.zeros([2]), r"a tensor of shape \[2\]"), (True, "True"), ("3", "'3'")],
)
def test_a_loss_fn_pair_with_a_bad_count_is_named(count: Any, shown: str) -> None:
    from dynbatch.integrations.core.losses import loss_and_count

    total = paddle.to_tensor([1.0], stop_gradient=False).sum()
    with pytest.raises(
        InputError, match=rf"loss_fn returned \(loss_sum, count\) whose count is {shown}"
    ):
        loss_and_count((total, count), np.arange(2), np.array([3, 3]), "tokens")


# -- the Trainer's token losses at their edges ----------------------------------------------
def test_token_cross_entropy_refuses_a_model_returning_only_its_loss_in_a_tuple() -> None:
    """A model that returns (loss,) or ModelOutput(loss=...) without logits is told that a
    loss alone is a mean that cannot be re-weighted (it was told 'per_sample_cross_entropy
    found no logits ... pass loss_fn=... -> per-sample losses')."""
    from dynbatch.integrations.paddlenlp import token_cross_entropy

    labels = {"labels": paddle.to_tensor([[-100, 1, 2]])}
    with pytest.raises(InputError, match="only a loss") as info:
        token_cross_entropy((paddle.to_tensor(1.5),), labels)
    assert "per_sample_cross_entropy" not in str(info.value)


def _per_token_loss(outputs: Any, batch: Any) -> Any:
    """Per-token losses [n, seq - 1], 0 where the label is ignored (prompt and padding)."""
    logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs.logits
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    safe = paddle.where(mask, labels, paddle.zeros_like(labels))
    losses = paddle.nn.functional.cross_entropy(
        logits[:, :-1], safe.unsqueeze(-1), reduction="none"
    ).squeeze(-1)
    return losses * mask.astype("float32")


def test_trainer_per_token_losses_with_loss_tokens_are_the_mean_over_loss_tokens(
    tmp_path: Path,
) -> None:
    """accumulate='tokens' is the mean 'over its real tokens, the lengths or loss_tokens';
    with loss_tokens and a per-token loss_fn, training_step counted the full lengths
    (loss_and_count got run.sampler.lengths) and raised RuntimeError 'the window's count over
    all ranks is 154, the plan's 77'."""
    from trainer_toy import make_args, make_recorder

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    ds = Pairs(32, seed=8)
    rec = make_recorder(grads=1)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        loss_tokens=ds.loss_tokens,
        accumulate="tokens",
        loss_fn=_per_token_loss,
        callbacks=[rec],
    )
    trainer.train()
    indices = np.concatenate(rec.windows[0].indices)
    ref = tiny_lm()
    ref.set_state_dict(rec.weights[0])
    expected = reference_grads(ref, ds, indices)
    assert worst(rec.grads[0], expected) < 1e-5 * max(1.0, scale(expected))


def test_trainer_does_not_apply_a_window_without_loss_tokens(tmp_path: Path) -> None:
    """NOTE [ one update engine ]: a window that holds nothing to average over is not applied
    on any rank, and the Trainer 'raises on the same verdict'. training_step raised only on a
    non-finite window: a window of count 0 went to AdamW, whose momentum moved the weights
    (and the LR schedule stepped), while GradientAccumulator skipped the same window."""
    from trainer_toy import make_args, make_recorder

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer, token_cross_entropy

    ds = Pairs(16, seed=3)
    for i in range(4, 8):  # the second window: no token carries a loss
        ds.labels[i] = np.full_like(ds.labels[i], -100)
    ds.loss_tokens = dynbatch.loss_token_counts(ds.labels)
    rec = make_recorder(grads=3)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, max_steps=2, per_device_train_batch_size=4),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        loss_tokens=ds.loss_tokens,
        accumulate="tokens",
        loss_fn=token_cross_entropy,
        max_cost=1000,
        cost="linear",
        order="none",
        max_batch_size=4,
        callbacks=[rec],
    )
    try:
        trainer.train()
    except (InputError, ValueError, RuntimeError):
        return  # refused, as the note says
    window = rec.windows[1]
    assert ds.loss_tokens[np.concatenate(window.indices)].sum() == 0, "precondition"
    after = {n: p.numpy() for n, p in trainer.model.state_dict().items()}
    moved = max(float(np.abs(after[n] - rec.weights[1][n]).max()) for n in after)
    assert moved == 0.0, f"a window without loss tokens moved the weights by {moved}"


def test_a_causal_lm_without_a_loss_fn_trains_on_its_token_loss(tmp_path: Path) -> None:
    """An outside tester's finding: a ``...ForCausalLM`` given no ``loss_fn`` got the
    classifier's per-sample loss and failed at the first step inside paddle (``input_dims3,
    label_dims1``); packed, the same model already defaulted to the token loss."""
    from dynbatch.integrations.paddlenlp import token_cross_entropy

    ds = Pairs(24, seed=2)
    trainer = lm_trainer(tmp_path, ds, loss_fn=None, args={"max_steps": 2})
    assert trainer.loss_fn.func is token_cross_entropy, "a causal LM's default loss"
    assert trainer.loss_fn.keywords == {"label_key": "labels"}
    trainer.train()
    assert int(trainer.state.global_step) == 2
