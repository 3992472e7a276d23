"""A packed update is the fixed batch's update, only computed another way.

For a ``DynamicBatchSampler(lengths, batch_size=B, pack_len=P, max_cost=...)`` each
update (the micro-batches between two window ends) holds exactly the fixed batch's
update: the ``B`` samples that ``shuffled(arange(N), seed, epoch)[u*B:(u+1)*B]`` draws
(NOTE [ packed updates ] in :mod:`dynbatch.plan.packs.epochs`). Run as the sampler
yields it, each micro-batch through ``PackCollator.for_sampler(sampler)`` and the model,
the exact mean over the update by ``GradientAccumulator``, its gradient is the gradient of
those ``B`` samples run as the fixed batch runs them: one batch, padded to its longest
(``dynbatch.Pad``), the mean over its loss tokens (Qwen2, a causal LM: ``token_loss``,
the collator's labels shifted as it documents) or over its samples (BERT, sequence
classification: each sample's [CLS] pooled from its row). Real paddlenlp models built
from tiny configs, on the CPU, in float32 and in float64 (see :data:`TOLERANCES`).

The cases cover the fine-tuning regime, rows long enough to hold more than ``B`` of the
samples (so each update is one row: an update made of whole rows would have held more
samples, and the epoch fewer updates), and a ``max_cost`` that holds fewer rows than an
update needs (so it spans several micro-batches); the first update of epoch 1 and its
last, which holds the rest; and with a time model, where some of an update's
micro-batches run padded (one sample a row) and others packed.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import dynbatch
from dynbatch.plan.packs import PackLayout
from dynbatch.plan.splits import shuffled

pytest.importorskip("paddlenlp")  # and paddle, which it needs
import paddle
from packed_models import (
    MAX_POSITIONS,
    VOCAB,
    default_dtype,
    gradients,
    packed_pooled,
    tiny_bert,
    tiny_qwen2,
)

N = 45  # no B below divides it: the last update holds the rest
EPOCH = 1
SEED = 11
#: Per dtype, ``assert_allclose``'s ``rtol`` and ``atol``. In float32 a padded batch and
#: packed rows sum the same terms in another order: BERT's gradients here reach ~1.8 (its
#: initializer_range of 0.2) and differ by up to ~2.2e-6, so atol is 1e-5; Qwen2's by ~4e-8.
#: In float64 the difference is float order for BERT (~4e-15) and ~5e-9 for Qwen2, whose
#: ``token_loss`` computes the cross entropy in float32 whatever the logits' dtype.
TOLERANCES = {"float32": (1e-5, 1e-5), "float64": (1e-5, 1e-7)}
#: (batch_size, pack_len, max_cost, time_model): the cost is linear, so a micro-batch holds
#: max_cost // pack_len rows; with a time model some micro-batches run padded, a sample a row
CASES = {
    "rows-fit-more-than-B": (6, 240, 240, None),  # each update one row, one micro-batch
    "several-micro-batches": (8, 48, 96, None),  # rows of 48, two a micro-batch
    "at-the-step-time": (8, 48, 96, "0.01,1e-6,1e-8"),  # packed and padded micro-batches
}


def corpus(seed: int = 0) -> list[dict[str, Any]]:
    """``N`` samples of 2 to MAX_POSITIONS tokens; a causal LM's labels are the ids but a
    masked prompt (the first third); a classifier's label is ``label``, one of 3."""
    rng = np.random.default_rng(seed)
    out = []
    for n in rng.integers(2, MAX_POSITIONS + 1, N).tolist():
        ids = rng.integers(1, VOCAB, n)
        labels = ids.copy()
        labels[: n // 3] = -100
        out.append(
            {
                "input_ids": ids,
                "labels": labels,
                "token_type_ids": rng.integers(0, 2, n),
                "label": int(rng.integers(0, 3)),
            }
        )
    return out


DATA = corpus()
LENGTHS = np.array([s["input_ids"].size for s in DATA])


class Recorder:
    """An optimizer that applies nothing: each step keeps the gradients it would apply."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.steps: list[list[Any]] = []

    def step(self) -> None:
        self.steps.append(gradients(self.model))

    def clear_grad(self) -> None:
        self.model.clear_gradients()


def sampler_of(case: str) -> Any:
    batch_size, pack_len, max_cost, time_model = CASES[case]
    sampler = dynbatch.DynamicBatchSampler(
        lengths=LENGTHS,
        batch_size=batch_size,
        pack_len=pack_len,
        max_cost=max_cost,
        time_model=time_model,
        seed=SEED,
    )
    sampler.set_epoch(EPOCH)
    return sampler


def fixed_update(sampler: Any, u: int, epoch: int = EPOCH) -> Any:
    """The fixed batch's update ``u``: its ``B`` samples as the fixed batch draws them."""
    b = int(sampler.batch_size)
    return shuffled(np.arange(N), sampler.options.seed, epoch)[u * b : (u + 1) * b]


def packed_update(
    sampler: Any, u: int, model: Any, loss: Any, *, causal: bool
) -> tuple[list[Any], list[Any]]:
    """Update ``u`` run as the sampler yields it: each micro-batch through the sampler's
    collator and ``loss(model, rows, samples) -> (loss_sum, count)``, the accumulator
    stepping at the window's end. Returns the micro-batches and the gradient the step would
    apply."""
    ends = np.r_[0, sampler.epoch_plan(EPOCH).window_ends]
    sampler.seek(EPOCH, int(ends[u]))  # the update's first micro-batch
    recorder = Recorder(model)
    acc = dynbatch.GradientAccumulator(model, recorder, sampler=sampler)
    collate = dynbatch.PackCollator.for_sampler(sampler, causal=causal)
    model.clear_gradients()
    micro_batches = []
    for indices in sampler:
        samples = [DATA[i] for i in indices]
        fields = ("input_ids", "labels", "token_type_ids")
        rows = collate([{k: s[k] for k in fields} for s in samples])
        with acc.accumulate():
            loss_sum, count = loss(model, rows, samples)
            ended = acc.backward(loss_sum, count=count)
        micro_batches.append(list(indices))
        if ended:
            break
    assert len(micro_batches) == ends[u + 1] - ends[u], "the step came at the window's end"
    assert acc.optimizer_steps == 1 and len(recorder.steps) == 1
    return micro_batches, recorder.steps[0]


def lm_loss(model: Any, rows: dict[str, Any], samples: list[Any]) -> tuple[Any, Any]:
    """A packed micro-batch's summed token loss and loss tokens (labels shifted by the loss,
    each sample's first hidden by the collator)."""
    out = model(
        input_ids=paddle.to_tensor(rows["input_ids"]),
        position_ids=paddle.to_tensor(rows["position_ids"]),
        attention_mask=paddle.to_tensor(rows["attention_mask"]),
    )
    logits = out[0] if isinstance(out, (tuple, list)) else out.logits
    return dynbatch.token_loss(logits, paddle.to_tensor(rows["labels"]))


def classifier_loss(model: Any, rows: dict[str, Any], samples: list[Any]) -> tuple[Any, int]:
    """A packed micro-batch's summed per-sample cross entropy: each sample's [CLS], pooled,
    through the classifier; the samples in the order given, as the rows hold them."""
    logits = model.classifier(model.dropout(packed_pooled(model.bert, rows)))
    labels = paddle.to_tensor([s["label"] for s in samples])
    losses = paddle.nn.functional.cross_entropy(logits, labels, reduction="none")
    return losses.sum(), len(samples)


def fixed_lm_gradient(model: Any, indices: Any) -> list[Any]:
    """The fixed batch's gradient: one batch right-padded to its longest (a causal mask keeps
    the padding out), the mean over its loss tokens."""
    samples = [DATA[i] for i in indices]
    ids = dynbatch.Pad(pad_val=0, dtype="int64")([s["input_ids"] for s in samples])
    labels = dynbatch.Pad(pad_val=-100, dtype="int64")([s["labels"] for s in samples])
    model.clear_gradients()
    out = model(input_ids=paddle.to_tensor(ids))
    logits = out[0] if isinstance(out, (tuple, list)) else out.logits
    loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor(labels))
    (loss_sum / count.astype("float32")).backward()
    grads = gradients(model)
    model.clear_gradients()
    return grads


def fixed_classifier_gradient(model: Any, indices: Any) -> list[Any]:
    """The fixed batch's gradient: one batch padded to its longest (BERT masks the pad id),
    the mean over its samples."""
    samples = [DATA[i] for i in indices]
    ids = dynbatch.Pad(pad_val=0, dtype="int64")([s["input_ids"] for s in samples])
    types = dynbatch.Pad(pad_val=0, dtype="int64")([s["token_type_ids"] for s in samples])
    labels = dynbatch.Stack(dtype="int64")([s["label"] for s in samples])
    model.clear_gradients()
    logits = model(input_ids=paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
    paddle.nn.functional.cross_entropy(logits, paddle.to_tensor(labels)).backward()
    grads = gradients(model)
    model.clear_gradients()
    return grads


@functools.cache
def qwen2(dtype: str) -> Any:
    return tiny_qwen2(dtype=dtype)


@functools.cache
def bert(dtype: str) -> Any:
    return tiny_bert(classifier=True, dtype=dtype)


def check_preconditions(case: str, sampler: Any, micro_batches: list[Any]) -> None:
    """What each case is for, so a change of plan cannot make it vacuous."""
    b, pack_len, _, time_model = CASES[case]
    assert sampler.epoch_plan(EPOCH).window_ends.size == -(-N // b), "the fixed batch's updates"
    if case == "rows-fit-more-than-B":
        shortest = np.sort(LENGTHS)[: b + 1].sum()
        assert shortest <= pack_len, "a row could hold more than B samples"
        assert len(micro_batches) == 1, "the update is one micro-batch"
    else:
        assert len(micro_batches) > 1, "the update spans several micro-batches"
    collate = dynbatch.PackCollator.for_sampler(sampler)
    fields = ("input_ids", "labels", "token_type_ids")
    rows = [
        collate([{k: DATA[i][k] for k in fields} for i in mb])["sample_starts"]
        for mb in micro_batches
    ]
    assert any(((s >= 0).sum(axis=1) > 1).any() for s in rows), "a row holds several samples"
    if time_model is not None:
        layout = PackLayout.from_options(sampler.options)
        lens = [LENGTHS[mb] for mb in micro_batches]
        padded = [not layout.choose(k, np.array([0, k.size])).packed[0] for k in lens]
        assert any(p and k.size > 1 for p, k in zip(padded, lens, strict=True)), "padded ran"


def check_gradients(packed: list[Any], fixed: list[Any], dtype: str) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert len(packed) == len(fixed) > 0, "the same parameters have gradients"
    for k, (a, b) in enumerate(zip(packed, fixed, strict=True)):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"parameter {k}")


UPDATES = [0, -1]  # the first update and the last, which holds the rest


@pytest.mark.parametrize("epoch", [0, EPOCH])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_packed_update_holds_the_fixed_batchs_update(case: str, epoch: int) -> None:
    sampler = sampler_of(case)
    sampler.set_epoch(epoch)
    ends = np.r_[0, sampler.epoch_plan(epoch).window_ends]
    b = int(sampler.batch_size)
    assert ends.size - 1 == -(-N // b), "the fixed batch's ceil(N / B) updates"
    yielded = list(sampler)
    assert len(yielded) == ends[-1] and all(len(mb) > 0 for mb in yielded)
    for u in range(ends.size - 1):
        samples = np.concatenate(yielded[ends[u] : ends[u + 1]])
        fixed = fixed_update(sampler, u, epoch)
        assert np.array_equal(np.sort(samples), np.sort(fixed)), f"update {u}"
        assert fixed.size == min(b, N - u * b), f"update {u}: B samples, the last the rest"


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
@pytest.mark.parametrize("u", UPDATES, ids=["first", "last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_packed_lm_updates_gradient_is_the_fixed_batchs(case: str, u: int, dtype: str) -> None:
    sampler = sampler_of(case)
    u = u % sampler.epoch_plan(EPOCH).window_ends.size
    model = qwen2(dtype)
    with default_dtype(dtype):  # paddlenlp makes its masks' fill in the default dtype
        micro_batches, packed = packed_update(sampler, u, model, lm_loss, causal=True)
        check_preconditions(case, sampler, micro_batches)
        fixed = fixed_update(sampler, u)
        assert np.array_equal(np.sort(np.concatenate(micro_batches)), np.sort(fixed))
        check_gradients(packed, fixed_lm_gradient(model, fixed), dtype)


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
@pytest.mark.parametrize("u", UPDATES, ids=["first", "last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_packed_classifier_updates_gradient_is_the_fixed_batchs(
    case: str, u: int, dtype: str
) -> None:
    sampler = sampler_of(case)
    u = u % sampler.epoch_plan(EPOCH).window_ends.size
    model = bert(dtype)
    with default_dtype(dtype):  # paddlenlp makes its masks' fill in the default dtype
        micro_batches, packed = packed_update(sampler, u, model, classifier_loss, causal=False)
        check_preconditions(case, sampler, micro_batches)
        fixed = fixed_update(sampler, u)
        assert np.array_equal(np.sort(np.concatenate(micro_batches)), np.sort(fixed))
        check_gradients(packed, fixed_classifier_gradient(model, fixed), dtype)
