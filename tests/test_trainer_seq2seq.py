"""DynamicBatchTrainer on an encoder-decoder (paddlenlp's BART, tiny, CPU) over (source, target)
pairs: the planned steps, the target tokens' exact mean on one rank and two, exact resume, and
what is refused for pairs (NOTE [ the Trainer on pairs ] in dynbatch.integrations.core.seq2seq).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("paddlenlp")

import dynbatch
from dynbatch.errors import InputError

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from seq2seq_toy import (
    Translations,
    collate,
    grad_gap,
    pair_lengths,
    reference_grads,
    s2s_trainer,
    target_token_loss,
    tiny_bart,
    tiny_t5,
)
from test_trainer import run_script
from trainer_toy import make_recorder


def test_pairs_train_in_exactly_the_fixed_batchs_planned_steps(tmp_path: Path) -> None:
    ds = Translations(40)
    rec = make_recorder()
    trainer = s2s_trainer(tmp_path, ds, callbacks=[rec])
    assert trainer.train_sampler is not None
    assert trainer.train_sampler.lengths.tolist() == ds.lengths.tolist(), (
        "the length_fn's (source, target) pairs are the plan's lengths"
    )
    trainer.train()

    plain = dynbatch.DistributedDynamicBatchSampler(  # the recipe, planned independently
        lengths=ds.lengths, num_replicas=1, rank=0, batch_size=8, seed=0
    )
    per_epoch = math.ceil(len(ds) / 8)
    assert rec.optimizer_steps == trainer.state.global_step == 2 * per_epoch, (
        "ceil(N / B) updates an epoch, as the fixed batch of 8 takes"
    )
    assert trainer.state.max_steps == trainer.total_steps() == 2 * per_epoch
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        batches = [idx.tolist() for w in windows for idx in w.indices]
        assert batches == [b.tolist() for b in plain.batches(epoch)], (
            f"epoch {epoch}: the plan's micro-batches, in order"
        )
        assert sorted(i for b in batches for i in b) == list(range(len(ds))), "each pair once"
        assert [w.count for w in windows] == [8.0] * per_epoch, "updates of 8 pairs"
    assert any(w.stop - w.start > 1 for w in rec.windows), "precondition: updates split"


@pytest.mark.parametrize("kind", ["bart", "t5"])
def test_each_update_is_the_mean_over_its_target_tokens(tmp_path: Path, kind: str) -> None:
    """The default loss of a ...ForConditionalGeneration: cross entropy over its labels, not
    shifted, -100 ignored; each update's gradient that of the mean over all its target
    tokens in one batch, whatever its micro-batches (T5 told its source's padding by an
    attention_mask, which BART reads from its pad id)."""
    make = tiny_t5 if kind == "t5" else tiny_bart
    ds = Translations(40, seed=1, attention_mask=kind == "t5")
    rec = make_recorder(grads=3)
    s2s_trainer(tmp_path, ds, model=make(), callbacks=[rec], args={"max_steps": 3}).train()
    assert len(rec.grads) == 3
    for step in range(3):
        window = rec.windows[step]
        tokens = [int(ds.lengths[idx, 1].sum()) for idx in window.indices]
        assert len(tokens) > 1, f"precondition: step {step} has micro-batches"
        sizes = [idx.size for idx in window.indices]
        assert len({t / n for t, n in zip(tokens, sizes, strict=True)}) > 1, (
            "precondition: micro-batches of unequal target tokens per pair (a mean of their "
            "means would differ)"
        )
        model = make()
        model.set_state_dict(rec.weights[step])
        expected = reference_grads(model, ds, np.concatenate(window.indices))
        assert grad_gap(rec.grads[step], expected) < 1e-5, (
            f"step {step}: the gradient of the mean over the step's target tokens"
        )


def test_updates_of_target_tokens_are_each_the_mean_over_their_target_tokens(
    tmp_path: Path,
) -> None:
    """accumulate="tokens" on pairs plans updates of target tokens (the planner's
    update_unit="tokens"): the fixed batch's target tokens an update, each update's gradient
    that of the exact mean over them."""
    ds = Translations(40, seed=1)
    rec = make_recorder(grads=2)
    trainer = s2s_trainer(tmp_path, ds, callbacks=[rec], accumulate="tokens", args={"max_steps": 2})
    assert trainer.train_sampler is not None
    assert trainer.train_sampler.options.update_unit == "tokens"
    trainer.train()
    for step in range(2):
        indices = np.concatenate(rec.windows[step].indices)
        assert rec.windows[step].count == ds.lengths[indices, 1].sum(), "its target tokens"
        assert len(rec.windows[step].indices) > 1, f"precondition: step {step} has micro-batches"
        model = tiny_bart()
        model.set_state_dict(rec.weights[step])
        assert grad_gap(rec.grads[step], reference_grads(model, ds, indices)) < 1e-5


@pytest.mark.parametrize("given", ["eval_lengths", "length_fn"])
def test_evaluation_on_pairs_is_the_mean_over_the_target_tokens(tmp_path: Path, given: str) -> None:
    """Dynamic eval batches of pairs, from eval_lengths of shape [N, 2] or the length_fn."""
    ds, dev = Translations(40), Translations(23, seed=4)
    known = {"eval_lengths": dev.lengths} if given == "eval_lengths" else {}
    trainer = s2s_trainer(tmp_path, ds, eval_dataset=dev, args={"max_steps": 2}, **known)
    trainer.train()
    loader = trainer.get_eval_dataloader()
    assert loader.batch_sampler.lengths.tolist() == dev.lengths.tolist(), "dynamic, on pairs"
    assert len({b.size for b in loader.batch_sampler.batches()}) > 1, "precondition: unequal"
    loss = trainer.evaluate()["eval_loss"]
    assert loss == pytest.approx(target_token_loss(trainer.model, dev), abs=1e-5)


@pytest.mark.slow
def test_two_ranks_take_the_mean_over_both_ranks_target_tokens(tmp_path: Path) -> None:
    from test_distributed import launch

    launch("seq2seq_ddp.py", tmp_path, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    n = ranks[0]["samples"]
    for epoch in ("0", "1"):
        union = sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch])
        assert union == list(range(n)), f"epoch {epoch}: every pair once over the ranks"
    for r in ranks:
        assert r["optimizer_steps"] == r["max_steps"] == r["planned"] == 2 * math.ceil(n / 8)
        assert max(r["grad_gaps"]) < 1e-5, (
            "each step's gradient is that of the mean over both ranks' target tokens"
        )
    assert ranks[0]["target_tokens"] != ranks[1]["target_tokens"], (
        "precondition: the ranks train unequal target tokens in a step"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "how"), [("s2s", "cut"), ("s2s", "kill"), ("s2stime", "cut"), ("s2sfollow", "cut")]
)
def test_a_stopped_run_resumes_to_the_same_pairs_and_weights(
    tmp_path: Path, kind: str, how: str
) -> None:
    """Stopped dead right after checkpoint-3 (``cut``), or SIGKILLed at a random step past it
    (``kill``, the job and its 2 loader workers), then resumed in a new process: the pairs
    trained and the final weights are those of the uninterrupted run (dropout on). Also
    planned at a step time of two lengths (``s2stime``), and resumed without it given
    (``s2sfollow``: the resume plans by the PairStepTimeModel its checkpoint holds)."""
    out, save = str(tmp_path), 3  # trainer_resume.SAVE_STEPS[kind]
    assert run_script("trainer_resume.py", kind, out, "full") == 0
    full = json.loads((tmp_path / "full.json").read_text())
    if kind != "s2s":
        assert len(full["batches"]) == 2 * 14 and full["planned"] == 2 * 10, (
            "precondition: the step time of pairs cut 10 updates into 14 micro-batches an epoch"
        )
    if how == "cut":
        assert run_script("trainer_resume.py", kind, out, "cut", str(save)) == 3
        cut = json.loads((tmp_path / "cut.json").read_text())
        assert cut["last_epoch"] == 0 and not cut["ends_epoch"], "precondition: mid-epoch"
        before = cut["batches"]
    else:
        seed = int(np.random.default_rng().integers(2**31))
        step = int(np.random.default_rng(seed).integers(save + 1, full["planned"]))
        killed = run_script("trainer_resume.py", kind, out, "kill", str(step), ok=(-9,))
        assert killed < 0, f"killed at step {step} (seed {seed})"
        run = json.loads((tmp_path / f"kill-{step}.json").read_text())
        kept = save * ((step - 1) // save)  # the newest checkpoint before the kill
        before = [i for window in run["batches"][:kept] for i in window]
    assert run_script("trainer_resume.py", kind, out, "resume") == 0
    resumed = json.loads((tmp_path / "resume.json").read_text())
    assert before + resumed["batches"] == full["batches"], (
        "the pairs trained before the checkpoint, then the resumed run's, are the whole run's"
    )
    assert resumed["global_step"] == full["global_step"] == full["planned"]
    assert resumed["training_loss"] == pytest.approx(full["training_loss"], abs=1e-6)
    weights, after = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resume.npz")
    for name in weights.files:
        diff = float(np.abs(weights[name] - after[name]).max())
        assert diff <= 1e-6, f"{name}: final weights within 1e-6 of the uninterrupted run's"


def test_packing_pairs_is_refused_by_name(tmp_path: Path) -> None:
    ds = Translations(20)
    with pytest.raises(InputError, match=r"packing is refused for \(source, target\) pairs"):
        s2s_trainer(tmp_path, ds, pack_len=64, max_batch_size=1, time_model=None)
    from trainer_toy import tiny_bert

    with pytest.raises(InputError, match=r"packing is refused .* lengths of shape \[20, 2\]"):
        s2s_trainer(tmp_path, ds, model=tiny_bert(), pack_len=64, time_model=None)


@pytest.mark.parametrize("as_text", [False, True], ids=["object", "text"])
def test_a_step_time_of_pairs_plans_the_time_split_of_pairs(tmp_path: Path, as_text: bool) -> None:
    """time_model= a PairStepTimeModel (or its six numbers): the recipe cuts the fixed batch's
    updates of pairs at it, as the sampler given it does (NOTE [ the Trainer on pairs ])."""
    from dynbatch.plan.pair_steptime import PairStepTimeModel

    ds = Translations(40)
    model = PairStepTimeModel(c=0.001, a_s=1e-5, a_t=2e-5, b_t=1e-7, cross=1e-7)
    given = "0.001,1e-5,2e-5,0,1e-7,1e-7" if as_text else model
    trainer = s2s_trainer(tmp_path, ds, time_model=given)
    assert trainer.train_sampler is not None
    assert trainer.train_sampler.options.time_model == model
    kw = {"lengths": ds.lengths, "num_replicas": 1, "rank": 0, "batch_size": 8, "seed": 0}
    timed = dynbatch.DistributedDynamicBatchSampler(**kw, time_model=model)
    plain = dynbatch.DistributedDynamicBatchSampler(**kw)
    for epoch in range(2):
        got = [b.tolist() for b in trainer.train_sampler.batches(epoch)]
        assert got == [b.tolist() for b in timed.batches(epoch)], f"epoch {epoch}: timed plan"
        assert len(got) != len(list(plain.batches(epoch))), "precondition: not padding-free"
        assert len(got) != math.ceil(len(ds) / 8), "precondition: some updates cut"
    assert trainer.total_steps() == 2 * math.ceil(len(ds) / 8), "ceil(N / B) updates an epoch"


def test_a_step_time_of_the_other_lengths_is_refused_by_name(tmp_path: Path) -> None:
    """One length's StepTimeModel for pairs names PairStepTimeModel; a PairStepTimeModel for
    one length a sample names StepTimeModel."""
    from test_trainer import recipe_trainer
    from trainer_toy import Reviews, make_args

    from dynbatch.plan.pair_steptime import PairStepTimeModel

    with pytest.raises(InputError, match=r"DynamicBatchTrainer: .*one length.*PairStepTimeModel"):
        s2s_trainer(tmp_path, Translations(20), time_model="0.001,1e-5,0")
    pair_step = PairStepTimeModel(c=0.001, a_s=1e-5)
    with pytest.raises(InputError, match=r"DynamicBatchTrainer: .*pairs.*StepTimeModel\(c, a, b"):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model=pair_step)


def test_a_measured_step_time_on_pairs_is_refused_before_any_step(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"time_model='measure' .* a step time of two lengths"):
        s2s_trainer(tmp_path, Translations(20), time_model="measure")


def test_on_an_accelerator_the_default_plans_pairs_without_a_step_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """time_model="auto" measures the step time on an accelerator, one of one length: on pairs
    it plans without one, as on a CPU (NOTE [ the Trainer on pairs ])."""
    from dynbatch.integrations.core import planner

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the step time of one length was measured on pairs")

    monkeypatch.setattr(planner, "current_device", lambda: "gpu:0")
    monkeypatch.setattr(planner, "measure_time_model", never)
    trainer = s2s_trainer(tmp_path, Translations(20))
    assert trainer.train_sampler is not None
    assert trainer.train_sampler.options.time_model is None


def test_an_encoder_decoder_without_a_collator_is_refused_naming_seq2seq_collator(
    tmp_path: Path,
) -> None:
    """paddlenlp's default collator pads no side and shifts no target: refused when the
    Trainer is made, naming the collator that does both (NOTE [ the Trainer on pairs ])."""
    expected = r"data_collator=None .*dynbatch\.Seq2SeqCollator\(pad_id=0, decoder_start_id=2\)"
    with pytest.raises(InputError, match=expected):
        s2s_trainer(tmp_path, Translations(20), data_collator=None)


def test_an_encoder_decoder_refuses_one_length_where_it_would_count_the_wrong_side(
    tmp_path: Path,
) -> None:
    """An outside tester's findings: one length a pair with accumulate="tokens" counted the
    sources' tokens (the loss is over the targets), and eval_lengths of one length beside
    training pairs failed only at evaluate(), naming neither. Both refused when the Trainer
    is made, naming the argument and the [N, 2] it takes."""
    ds = Translations(20)
    pairs = np.array([pair_lengths(ds[i]) for i in range(len(ds))])
    with pytest.raises(
        InputError,
        match=r"accumulate='tokens' .*lengths of one per sample.*"
        r"\[N, 2\]",
    ):
        s2s_trainer(tmp_path, ds, length_fn=None, lengths=pairs[:, 0], accumulate="tokens")
    with pytest.raises(InputError, match=r"eval_lengths .*one per sample.*\[N, 2\]"):
        s2s_trainer(
            tmp_path,
            ds,
            length_fn=None,
            lengths=pairs,
            eval_dataset=ds,
            eval_lengths=pairs[:, 0],
        )


def test_seq2seq_collator_trains_the_pairs_as_the_dict_of_pads_does(tmp_path: Path) -> None:
    """Samples of source and target ids batched by dynbatch.Seq2SeqCollator (the target
    shifted by it, not stored twice): the same batches and the same first update as the
    Dict of Pads on samples that hold their shifted target."""
    from seq2seq_toy import PAD, START, SourceTarget

    ds = Translations(24, seed=2)
    runs = []
    for data, collator, length_fn in (
        (ds, collate, None),
        (
            SourceTarget(ds),
            dynbatch.Seq2SeqCollator(pad_id=PAD, decoder_start_id=START),
            lambda s: (len(s["source"]), len(s["target"])),
        ),
    ):
        rec = make_recorder(grads=1)
        kw = {} if length_fn is None else {"length_fn": length_fn}
        trainer = s2s_trainer(
            tmp_path, data, data_collator=collator, callbacks=[rec], args={"max_steps": 1}, **kw
        )
        trainer.train()
        runs.append(rec)
    (dicts, s2s) = runs
    assert [i.tolist() for i in s2s.windows[0].indices] == [
        i.tolist() for i in dicts.windows[0].indices
    ], "the same plan"
    assert s2s.windows[0].count == dicts.windows[0].count, "the same target tokens"
    assert grad_gap(s2s.grads[0], dicts.grads[0]) < 1e-6, "the same gradient"


@pytest.mark.parametrize("wrapped", [False, True], ids=["model", "wrapped-model"])
def test_a_batch_without_decoder_inputs_is_refused_by_name(tmp_path: Path, wrapped: bool) -> None:
    """paddlenlp's BART given no decoder_input_ids builds them from the source: it would train
    to copy the source, silently. Also when the Trainer steps a wrapper of it (DataParallel
    on several ranks)."""
    import paddle

    class Wrapper(paddle.nn.Layer):  # type: ignore[misc]
        def __init__(self, inner: object) -> None:
            super().__init__()
            self._layers = inner

        def forward(self, **inputs: object) -> object:
            return self._layers(**inputs)

    def no_decoder_inputs(samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        batch = collate(samples)
        del batch["decoder_input_ids"]
        return batch

    trainer = s2s_trainer(
        tmp_path, Translations(20), data_collator=no_decoder_inputs, args={"max_steps": 1}
    )
    if wrapped:
        trainer._wrap_model = lambda model, training=True: Wrapper(model)
    with pytest.raises(InputError, match="given no 'decoder_input_ids'"):
        trainer.train()
