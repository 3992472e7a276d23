"""DynamicBatchTrainer(..., pack_len=...) on paddlenlp's real models, CPU float32
(NOTE [ the Trainer packs ]): a causal LM's update is the unpacked Trainer's on the same samples, a
classifier's the mean over its samples alone (packed, or laid out at a given or probed step
time); every sample once, the plan's steps exactly; what it cannot pack for is named. Most
tests pass ``time_model=None``: every micro-batch packed, and no probe to wait for.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")
import paddle

import dynbatch
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer, token_cross_entropy
from dynbatch.paddle.safe_collate import raise_failure

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from lm_toy import Pairs, tiny_lm
from lm_toy import collate as lm_collate
from trainer_toy import (
    Reviews,
    collate,
    direct_eval,
    make_args,
    make_recorder,
    reference_grads,
    tiny_bert,
)

#: Rows of 40 tokens, one row a micro-batch: an update of 8 samples is several micro-batches,
#: most rows several samples
PACK = {"pack_len": 40, "max_batch_size": 1, "time_model": None}


def packed_bert(seed: int = 0) -> Any:
    """The tiny BERT with positions that matter (trainer_toy.tiny_bert)."""
    return tiny_bert(seed, initializer_range=0.2)


def forward_counter(model: Any) -> list[int]:
    """``[n]``: the model's forward calls so far (a pre-hook); the step-time probe runs some."""
    calls = [0]

    def count(layer: Any, inputs: Any) -> None:
        calls[0] += 1

    model.register_forward_pre_hook(count)
    return calls


def packed_rows(window: Any) -> bool:
    """Whether ``window`` spans several micro-batches and some row holds several samples."""
    return window.stop - window.start > 1 and max(idx.size for idx in window.indices) > 1


def test_a_packed_lm_update_is_the_unpacked_trainers_update_on_the_same_samples(
    tmp_path: Path,
) -> None:
    ds = Pairs(48, seed=3)
    rec = make_recorder(grads=2)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path / "packed", per_device_train_batch_size=8, max_steps=2),
        train_dataset=ds,
        data_collator=lm_collate,
        lengths=ds.lengths,
        callbacks=[rec],
        **{**PACK, "pack_len": 64},  # the pairs are up to 48 tokens
    )
    assert trainer.loss_fn.func is token_cross_entropy, "a causal LM packs with the token loss"
    trainer.train()
    assert any(packed_rows(w) for w in rec.windows[:2]), (
        "precondition: an update of several micro-batches, rows of several samples"
    )
    for step in range(2):
        window = rec.windows[step]
        samples = np.concatenate(window.indices)
        # the unpacked Trainer, from the same weights, on those samples as one update
        unpacked = make_recorder(grads=1)
        model = tiny_lm()
        model.set_state_dict(rec.weights[step])
        DynamicBatchTrainer(
            model=model,
            args=make_args(
                tmp_path / f"unpacked{step}",
                per_device_train_batch_size=int(samples.size),
                max_steps=1,
            ),
            train_dataset=paddle.io.Subset(ds, samples.tolist()),
            data_collator=lm_collate,
            lengths=ds.lengths[samples],
            loss_fn=token_cross_entropy,
            time_model=None,
            callbacks=[unpacked],
        ).train()
        assert sorted(np.concatenate(unpacked.windows[0].indices)) == list(range(samples.size))
        expected = unpacked.grads[0]
        worst = max(float(np.abs(rec.grads[step][n] - g).max()) for n, g in expected.items())
        assert worst < 1e-5, f"step {step}: the packed update is the pooled per-token mean"


@pytest.mark.parametrize(
    "time_model", [None, "0.05,1e-5,1e-4", "measure"], ids=["packed", "step-time", "probed"]
)
def test_a_packed_classifier_update_is_the_mean_over_its_samples_alone(
    tmp_path: Path, time_model: str | None
) -> None:
    """Packed rows, or with a step time (given, or the Trainer's default: probed on the
    model) each micro-batch packed or padded as the plan priced it
    (PackCollator.for_sampler): the same update either way."""
    ds = Reviews(60)
    rec = make_recorder(grads=3)
    trainer = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path, per_device_train_batch_size=8),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        callbacks=[rec],
        **{**PACK, "time_model": time_model, "max_batch_size": None if time_model else 1},
    )
    trainer.train()
    sampler = trainer.train_sampler
    assert sampler is not None and sampler.options.pack_len == 40
    if time_model == "measure":
        assert trainer.options.time_model is not None, "precondition: the step time probed"
        time_model = trainer.options.time_model
    elif time_model is None:
        assert any(packed_rows(w) for w in rec.windows[:3]), (
            "precondition: an update of several micro-batches, rows of several samples"
        )
    else:  # the step time lays these micro-batches out padded, narrower than a row
        laid = [
            trainer.train_collator([ds[i] for i in b]) for w in rec.windows[:3] for b in w.indices
        ]
        assert any(batch["input_ids"].shape[1] < 40 for batch in laid), "precondition: padded"
    for step in range(3):
        window = rec.windows[step]
        indices = np.concatenate(window.indices)
        ref = packed_bert()
        ref.set_state_dict(rec.weights[step])
        expected = reference_grads(ref, ds, indices, np.ones(indices.size))
        worst = max(float(np.abs(rec.grads[step][n] - g).max()) for n, g in expected.items())
        assert worst < 1e-5, f"step {step}: the mean of each sample's loss, each sample alone"
    plain = dynbatch.DynamicBatchSampler(
        lengths=ds.lengths,
        batch_size=8,
        pack_len=40,
        max_batch_size=None if time_model else 1,
        time_model=time_model,
    )  # counted independently
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        seen = sorted(i for w in windows for idx in w.indices for i in idx.tolist())
        assert seen == list(range(len(ds))), f"epoch {epoch}: every sample exactly once"
        assert [i.tolist() for w in windows for i in w.indices] == [
            b.tolist() for b in plain.batches(epoch)
        ], f"epoch {epoch}: the packed plan's micro-batches, in order"
    steps = plain.steps_for_epochs(range(2))
    assert trainer.state.global_step == trainer.state.max_steps == steps == rec.optimizer_steps
    logs = [log for log in rec.logs if "loss" in log]
    assert all(0 < log["cost_ratio_max"] <= 1 for log in logs), "packed rows within the budget"
    # packed rows are mostly tokens; a step time may lay an update out padded (the probed one
    # is measured, so only what holds for any step time is asserted there)
    floor = 0.5 if time_model is None else 0.0
    assert all(floor < log["padding_efficiency"] <= 1 for log in logs), "real tokens / computed"


def test_a_packed_micro_batch_is_the_collators_rows_and_the_logs_count_them(
    tmp_path: Path,
) -> None:
    """The loader's batch is PackCollator's rows of the plan's samples, in the plan's order;
    the logged padding efficiency is their real tokens over rows x their width (the fullest)."""
    ds = Reviews(30)
    trainer = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        **PACK,
    )
    loader = trainer.get_train_dataloader()
    item = next(iter(loader))
    window, batch = item["window"], item["micro_batches"][0]
    order = window.indices[0]
    rows = dynbatch.PackCollator(40, causal=False)([{"input_ids": ds.ids[i]} for i in order])
    np.testing.assert_array_equal(batch["input_ids"].numpy(), rows["input_ids"])
    np.testing.assert_array_equal(batch["position_ids"].numpy(), rows["position_ids"])
    np.testing.assert_array_equal(batch["labels"].numpy(), ds.labels[order])
    cls = batch["cls_index"].numpy()
    np.testing.assert_array_equal(
        batch["input_ids"].numpy()[cls[:, 0], cls[:, 1]], [ds.ids[i][0] for i in order]
    )
    table = trainer.run.table(0) if trainer.run is not None else {}
    width = rows["input_ids"].shape
    fullest = int((rows["sample_ids"] >= 0).sum(axis=1).max())
    assert width[1] == fullest <= 40, "as wide as the fullest row, at most pack_len"
    assert table["padded_tokens"][0] == width[0] * width[1], "rows x their width, as collated"


def test_what_packing_cannot_drive_is_named(tmp_path: Path, monkeypatch: Any) -> None:
    from paddlenlp.transformers import BertForTokenClassification, Qwen2ForSequenceClassification

    ds = Reviews(20)

    def make(model: Any, **kw: Any) -> Any:
        return DynamicBatchTrainer(
            model=model,
            args=make_args(tmp_path, per_device_train_batch_size=4),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            **{**PACK, **kw},
        )

    bert = packed_bert()
    token = BertForTokenClassification(bert.config)
    with pytest.raises(dynbatch.InputTypeError, match=r"pack_len=40.*BertForTokenClassification"):
        make(token)
    qwen = Qwen2ForSequenceClassification(tiny_lm().config)
    with pytest.raises(dynbatch.InputTypeError, match=r"Qwen2ForSequenceClassification.*pooler"):
        make(qwen)
    monkeypatch.setenv("USE_CASUAL_MASK", "True")
    with pytest.raises(dynbatch.InputError, match=r"USE_CASUAL_MASK=True"):
        make(tiny_lm())
    monkeypatch.delenv("USE_CASUAL_MASK")
    with pytest.raises(dynbatch.InputError, match=r"pack_len=40 packs for the model.*model="):
        make(None)
    with pytest.raises(dynbatch.InputError, match=r"pack_len must be .*got pack_len=0"):
        make(bert, pack_len=0)


class Extra(Reviews):
    """Reviews whose samples carry a field the packed rows would drop, or a wrong label."""

    def __init__(self, n: int, extra: dict[str, Any]) -> None:
        super().__init__(n)
        self.extra = extra

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**super().__getitem__(i), **self.extra}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"text": "a review"}, r"field 'text'.*would drop"),
        ({"attention_mask": np.zeros(3, np.int64)}, r"attention_mask must be 1-D 0/1"),
        ({"labels": np.array([0, 1])}, r"one integer label a sample in 'labels'"),
    ],
    ids=["extra-field", "a-mask-of-another-length", "two-labels"],
)
def test_a_sample_the_packed_rows_cannot_hold_is_named(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    """Named when the Trainer is made (NOTE [ dynbatch's checks before the probe ]), though
    the user's collator would take the sample: the step-time probe never runs on it."""
    ds = Extra(20, extra)
    model = packed_bert()
    forwards = forward_counter(model)
    with pytest.raises(dynbatch.InputError, match=message):
        DynamicBatchTrainer(
            model=model,
            args=make_args(tmp_path, per_device_train_batch_size=4, max_steps=1),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            **{**PACK, "time_model": "measure"},
        )
    assert forwards[0] == 0, "refused before the probe ran a step"


class OneBad(Reviews):
    """Reviews whose shortest sample carries a field the packed rows would drop."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        bad = {"text": "a review"} if i == int(np.argmin(self.lengths)) else {}
        return {**super().__getitem__(i), **bad}


def test_a_collate_error_in_training_reaches_the_user_by_name(tmp_path: Path) -> None:
    """A sample the checks at construction did not read (they read the longest) fails in the
    loader's collator: the step raises its error, by name (paddle's loader would wait forever
    for the batch of a collator that raised)."""
    from deadline import within

    ds = OneBad(24)
    trainer = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path, per_device_train_batch_size=4, num_train_epochs=1),
        train_dataset=ds,
        lengths=ds.lengths,
        **PACK,
    )
    with within(120), pytest.raises(dynbatch.InputError, match=r"field 'text'.*would drop"):
        trainer.train()


def test_a_collate_error_in_evaluation_reaches_the_user_by_name(tmp_path: Path) -> None:
    """Without a data_collator the Trainer pads the eval samples itself: a sample it cannot
    pad fails in the loader's collator, and evaluation raises its error by name, on dynamic
    batches (eval_lengths) and on paddlenlp's fixed ones alike."""
    from deadline import within

    train, bad = Reviews(20), OneBad(16)
    trainer = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path, per_device_train_batch_size=4),
        train_dataset=train,
        eval_dataset=bad,
        lengths=train.lengths,
        eval_lengths=bad.lengths,
        **PACK,
    )
    with within(120), pytest.raises(dynbatch.InputError, match=r"field 'text'.*would drop"):
        trainer.evaluate()
    fixed = paddle.io.Subset(bad, list(range(len(bad))))  # no lengths: paddlenlp's batches
    with within(120), pytest.raises(dynbatch.InputError, match=r"field 'text'.*would drop"):
        trainer.evaluate(eval_dataset=fixed)


def test_samples_with_the_fields_the_rows_rebuild_train(tmp_path: Path) -> None:
    """A tokenizer's padded samples (a 0/1 attention_mask, positions from 0) and paddlenlp's
    ``label`` are taken as PackCollator takes them: the pad tokens are left out of the rows
    (NOTE [ a sample's own fields ])."""
    from dynbatch.integrations.core.packing import pack_collator

    base = Reviews(20)

    class Tokenized(Reviews):
        def __getitem__(self, i: int) -> dict[str, Any]:
            ids = np.concatenate([self.ids[i], [0, 0]])  # padded by 2
            return {
                "input_ids": ids,
                "token_type_ids": np.zeros_like(ids),
                "attention_mask": (np.arange(ids.size) < ids.size - 2).astype(np.int64),
                "position_ids": np.arange(ids.size),
                "label": self.labels[i],
            }

    ds = Tokenized(20)
    rec = make_recorder()
    trainer = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path, per_device_train_batch_size=4, max_steps=2),
        train_dataset=ds,
        data_collator=collate,
        lengths=base.lengths,  # the real tokens
        callbacks=[rec],
        **PACK,
    )
    assert trainer.packed is not None and trainer.train_sampler is not None
    rows = pack_collator(trainer.train_sampler, trainer.packed)
    batch = list(next(iter(trainer.train_sampler)))
    padded, alone = rows([ds[i] for i in batch]), rows([base[i] for i in batch])
    for key, value in alone.items():
        np.testing.assert_array_equal(padded[key], value, err_msg=key)
    trainer.train()
    assert trainer.state.global_step == 2


@pytest.mark.slow
def test_two_ranks_train_a_packed_classifier_to_one_update(tmp_path: Path) -> None:
    """The packed forward runs through DataParallel's call, so the ranks' gradients are
    all-reduced: the first update is the mean over both ranks' samples, the weights agree."""
    from test_distributed import launch

    launch("trainer_pack_ddp.py", tmp_path, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in ("0", "1"):
        union = sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch])
        assert union == list(range(ranks[0]["samples"])), f"epoch {epoch}: every sample once"
    for r in ranks:
        assert r["optimizer_steps"] == r["max_steps"] == r["expected_steps"], "exact steps"
        assert r["packed"], "precondition: rows of several samples, several micro-batches"
        assert r["grad_diff"] < 1e-5, "the update is the mean over both ranks' samples"
    assert np.allclose(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=1e-7)


def test_a_causal_lm_packs_pairs_as_it_packs_dicts(tmp_path: Path) -> None:
    """``(input_ids, labels)`` pairs (the SFT example's samples) make the rows dicts make."""
    from dynbatch.integrations.core.packing import pack_collator

    ds = Pairs(24, seed=4)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, per_device_train_batch_size=8),
        train_dataset=ds,
        data_collator=lm_collate,
        lengths=ds.lengths,
        **{**PACK, "pack_len": 64},
    )
    assert trainer.packed is not None and trainer.train_sampler is not None
    collate = pack_collator(trainer.train_sampler, trainer.packed)
    batch = next(iter(trainer.train_sampler))
    dicts = collate([ds[i] for i in batch])
    pairs = collate([(ds.ids[i], ds.labels[i]) for i in batch])
    assert (
        sorted(dicts) == sorted(pairs) == ["attention_mask", "input_ids", "labels", "position_ids"]
    )
    for key, value in dicts.items():
        np.testing.assert_array_equal(pairs[key], value, err_msg=key)
    assert (dicts["labels"] != -100).sum() == ds.loss_tokens[batch].sum(), "the loss tokens kept"
    with pytest.raises(dynbatch.InputTypeError, match=r"\(input_ids, labels\) pairs"):
        raise_failure(collate([ds.ids[batch[0]].tolist()]))  # the error comes in the batch


def test_the_log_says_how_the_step_time_runs_packed_updates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With pack_len the step time cuts no update: the log line says each update runs packed,
    split or whole, how many run each way, and the plan's micro-batches (it said "planning
    updates cut at the step time", the unpacked recipe's words)."""
    import logging

    from dynbatch.plan.steptime import check_time_model

    ds = Reviews(60)
    time_model = "0.05,1e-5,1e-4"
    with caplog.at_level(logging.INFO):
        trainer = DynamicBatchTrainer(
            model=packed_bert(),
            args=make_args(tmp_path, per_device_train_batch_size=8),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            **{**PACK, "time_model": time_model, "max_batch_size": None},
        )
    lines = [r.getMessage() for r in caplog.records if " s an epoch" in r.getMessage()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"dynbatch: step time {check_time_model(time_model)}: "), line
    assert "planning rows of pack_len=40 tokens, each update run packed, split or whole" in line
    assert "cut at the step time" not in line, line
    assert trainer.train_sampler is not None
    plan = trainer.train_sampler.epoch_plan(0)
    updates = len(plan.window_ends) if plan.window_ends is not None else plan.num_steps
    assert f" {updates} update(s), " in line, line
    ways = re.search(r"(\d+) packed, (\d+) split, (\d+) whole", line)
    assert ways is not None and sum(map(int, ways.groups())) == updates, line
    assert f"({plan.num_steps} micro-batch(es) a rank)" in line, line


@pytest.fixture
def on_cpu() -> Any:
    """Paddle on its CPU for the test (the default time_model asks where it runs)."""
    previous = paddle.device.get_device()
    paddle.set_device("cpu")
    yield
    paddle.set_device(previous)


@pytest.mark.parametrize("pack_len", [40, None], ids=["packed", "unpacked"])
def test_on_a_cpu_the_default_plans_without_probing_the_same_every_run(
    tmp_path: Path, monkeypatch: Any, pack_len: int | None, on_cpu: Any
) -> None:
    """A step time measured on a CPU is noisy, and there padding always costs: with the
    default time_model one run planned 1 packed / 24 split updates, the next 20 / 3 / 2. On
    a CPU the default probes nothing and plans as a CPU's step time is (every update packed;
    unpacked, the padding-free split): the same plan in every run."""
    from dynbatch.integrations.core import planner
    from dynbatch.integrations.core.probe import TIME_MODEL_FILE

    def no_probe(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the step time was probed on a CPU")

    monkeypatch.setattr(planner, "measure_time_model", no_probe)
    ds = Reviews(60)
    digests = []
    for run in ("a", "b"):
        model = packed_bert(seed=len(digests))
        forwards = forward_counter(model)
        trainer = DynamicBatchTrainer(
            model=model,
            args=make_args(tmp_path / run, per_device_train_batch_size=8),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            **({} if pack_len is None else {"pack_len": pack_len}),
        )
        assert forwards[0] == 0 and not (tmp_path / run / TIME_MODEL_FILE).exists(), "no probe"
        assert trainer.options.time_model is None
        assert trainer.train_sampler is not None
        digests.append(trainer.train_sampler.epoch_plan(0).digest())
    assert digests[0] == digests[1], "the same plan in every run"
    given_none = DynamicBatchTrainer(
        model=packed_bert(),
        args=make_args(tmp_path / "none", per_device_train_batch_size=8),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        time_model=None,
        **({} if pack_len is None else {"pack_len": pack_len}),
    )
    assert given_none.train_sampler is not None
    assert given_none.train_sampler.epoch_plan(0).digest() == digests[0], "as time_model=None"


@pytest.mark.parametrize("asked", ["measure", "default on an accelerator"])
def test_a_measured_step_time_that_changes_the_plan_is_a_warning(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture, asked: str
) -> None:
    """A plan that follows a measured step time differs from run to run as the measurement
    does: where it differs from the plan without one, the log says so at warning level, with
    the time_model= that keeps it. A step of a fixed cost runs each update whole, not packed.
    The step time is measured where asked (``"measure"``), and by default on an accelerator
    (here a stand-in: the probe itself is replaced)."""
    import logging

    from dynbatch.integrations.core import planner

    flat = dynbatch.StepTimeModel(c=0.05, a=0.0, b=0.0)
    probes: list[int] = []
    monkeypatch.setattr(planner, "measure_time_model", lambda *a, **k: probes.append(1) or flat)
    time_model = {"time_model": "measure"} if asked == "measure" else {}
    if asked != "measure":
        monkeypatch.setattr(planner, "current_device", lambda: "gpu:0")
    ds = Reviews(60)
    with caplog.at_level(logging.INFO):
        trainer = DynamicBatchTrainer(
            model=packed_bert(),
            args=make_args(tmp_path, per_device_train_batch_size=8),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            pack_len=40,
            **time_model,
        )
    assert probes == [1], "measured once"
    assert trainer.options.time_model == flat, "precondition: the plan follows the measurement"
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    changed = [line for line in warned if "changes the plan" in line]
    assert len(changed) == 1, warned
    assert changed[0].startswith(f"dynbatch: the step time measured, {flat}, changes the plan"), (
        changed[0]
    )
    assert f"pass time_model=dynbatch.{flat!r}" in changed[0], changed[0]


@pytest.mark.parametrize("kind", ["classifier", "causal LM"])
def test_without_a_data_collator_the_trainer_builds_its_own_batches(
    tmp_path: Path, kind: str
) -> None:
    """pack_len and no data_collator: training runs the rows of PackCollator.for_sampler (for
    the model's kind), the step-time probe (the default) and evaluation padded batches the
    Trainer builds from the same fields (the probe asked for: the default measures on an
    accelerator only). paddlenlp's default collator, which cannot stack
    samples of unequal lengths, is never used."""
    causal = kind == "causal LM"
    ds: Any = Pairs(40, seed=3) if causal else Reviews(40)
    model = tiny_lm() if causal else packed_bert()
    forwards = forward_counter(model)
    trainer = DynamicBatchTrainer(
        model=model,
        args=make_args(tmp_path, per_device_train_batch_size=8, max_steps=2),
        train_dataset=ds,
        eval_dataset=ds,
        lengths=ds.lengths,
        eval_lengths=ds.lengths,
        pack_len=64 if causal else 40,
        time_model="measure",  # the default measures on an accelerator only
    )
    assert forwards[0] > 0 and trainer.options.time_model is not None, "the step time probed"
    sampler = trainer.train_sampler
    assert sampler is not None
    for batch in list(sampler.batches(0))[:4]:
        samples = [ds[int(i)] for i in batch]
        built = trainer.train_collator(samples)
        fields = [s if causal else {"input_ids": s["input_ids"]} for s in samples]
        rows = dynbatch.PackCollator.for_sampler(sampler, causal=causal)(fields)
        for key in ("input_ids", "position_ids", *(["labels"] if causal else [])):
            np.testing.assert_array_equal(built[key], rows[key], err_msg=key)
    trainer.train()
    assert trainer.state.global_step == 2
    metrics = trainer.evaluate()  # dynamic batches (eval_lengths), padded by the Trainer
    all_samples = [ds[i] for i in range(len(ds))]
    trained = trainer.model
    trained.eval()
    with paddle.no_grad():
        if causal:
            batch = lm_collate(all_samples)
            logits = trained(input_ids=paddle.to_tensor(batch["input_ids"]))
            total, count = token_cross_entropy(
                logits, {"labels": paddle.to_tensor(batch["labels"])}
            )
            expected = float(total) / float(count)
        else:
            expected = direct_eval(trained, ds)[1]
    assert abs(metrics["eval_loss"] - expected) < 1e-5, "each sample's loss as alone"
    fallback = trainer.evaluate(eval_dataset=paddle.io.Subset(ds, list(range(16))))
    assert np.isfinite(fallback["eval_loss"]), "paddlenlp's fixed batches, padded by the Trainer"


@pytest.mark.parametrize(
    "case", ["extra-field", "longer-than-pack_len", "understated-length", "model-kind"]
)
def test_dynbatchs_checks_refuse_before_the_step_time_probe(tmp_path: Path, case: str) -> None:
    """What dynbatch refuses (the samples' fields, pack_len against the lengths, the lengths
    against the samples, the model's kind) is refused when the Trainer is made, before the
    step-time probe (time_model="measure") runs a step: no forward, no step time kept."""
    from paddlenlp.transformers import BertForTokenClassification

    from dynbatch.integrations.core.probe import TIME_MODEL_FILE

    ds: Any = Reviews(30)
    model, lengths, pack_len = packed_bert(), ds.lengths, 40
    message = {
        "extra-field": r"samples\[\d+\] has the field 'text'.*would drop",
        "longer-than-pack_len": r"longer than pack_len=20",
        "understated-length": r"lengths\[\d+\]=\d+.*input_ids",
        "model-kind": r"pack_len=40.*BertForTokenClassification",
    }[case]
    if case == "extra-field":
        ds = Extra(30, {"text": "a review"})
    elif case == "longer-than-pack_len":
        pack_len = 20
    elif case == "understated-length":
        lengths = ds.lengths - 1
    else:
        model = BertForTokenClassification(model.config)
    forwards = forward_counter(model)
    with pytest.raises((dynbatch.InputError, dynbatch.InputTypeError), match=message):
        DynamicBatchTrainer(
            model=model,
            args=make_args(tmp_path, per_device_train_batch_size=8),
            train_dataset=ds,
            data_collator=collate,  # the user's, which would take every sample
            lengths=lengths,
            pack_len=pack_len,
            time_model="measure",  # the default measures on an accelerator only
        )
    assert forwards[0] == 0, "no probe step ran"
    assert not (tmp_path / TIME_MODEL_FILE).exists(), "no step time measured"
