"""A tiny BERT, a toy classification set and the run settings of the Trainer tests.

Imported by tests/test_trainer*.py and by the scripts they run in their own processes
(trainer_resume.py, trainer_ddp.py), so all of them train the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

VOCAB = 60
PAD = 0
#: Shuffled batches under a quadratic budget: epochs 0 and 1 differ in batch count.
PLAN: dict[str, Any] = {"max_cost": 6 * 24**2, "cost": "quadratic", "order": "shuffle"}


def make_args(out: Any, *, arguments: Any = None, **changes: Any) -> Any:
    """The tests' TrainingArguments: 2 epochs on CPU, lr 1e-3, a log every step, no saves.

    ``arguments`` is the host's ``TrainingArguments`` class (paddlenlp's when None): the
    PaddleFormers tests (tests/paddleformers) make theirs here too.
    """
    if arguments is None:
        from paddlenlp.trainer import TrainingArguments as arguments

    values: dict[str, Any] = {
        "output_dir": str(out),
        "device": "cpu",
        "report_to": [],
        "disable_tqdm": True,
        "seed": 0,
        "learning_rate": 1e-3,
        "num_train_epochs": 2,
        "logging_steps": 1,
        "save_strategy": "no",
    }
    values.update(changes)
    return arguments(**values)


class Reviews(paddle.io.Dataset):  # type: ignore[misc]
    """``{"input_ids", "labels"}`` of long-tailed lengths in 3..40; the label is a token parity."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(np.ceil(rng.lognormal(2.3, 0.6, n)), 3, 40).astype(np.int64)
        self.ids = [rng.integers(1, VOCAB, k).astype("int64") for k in self.lengths]
        self.labels = np.array([int(ids[0] % 2) for ids in self.ids], dtype=np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}

    def __len__(self) -> int:
        return len(self.ids)


def collate(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Pad ``input_ids`` with 0 (BERT masks the pad id), stack the labels."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = np.full((len(samples), longest), PAD, dtype=np.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = s["input_ids"]
    return {"input_ids": ids, "labels": np.array([s["labels"] for s in samples], dtype=np.int64)}


def review_data(ds: Reviews, dev: Reviews | None = None) -> dict[str, Any]:
    """The Trainer's data keywords for ``ds`` (its collator and lengths) and, given an eval set
    ``dev``, for evaluating on it in dynamic batches (its lengths) with :func:`accuracy`."""
    data: dict[str, Any] = {"train_dataset": ds, "data_collator": collate, "lengths": ds.lengths}
    if dev is not None:
        data.update(eval_dataset=dev, eval_lengths=dev.lengths, compute_metrics=accuracy)
    return data


def tiny_bert(seed: int = 0, dropout: float = 0.0, initializer_range: float = 0.02) -> Any:
    """A tiny BertForSequenceClassification; ``initializer_range=0.2`` makes its positions
    matter (at 0.02 a sample's [CLS] moves less than 1e-4 when its positions run on: the
    packed tests, NOTE in tests/test_pack_isolation.py)."""
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification

    paddle.seed(seed)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=PAD,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        initializer_range=initializer_range,
    )
    return BertForSequenceClassification(config)


def reference_grads(model: Any, ds: Reviews, indices: np.ndarray, weights: np.ndarray) -> dict:
    """Gradients of ``sum(w_i * loss_i) / sum(w_i)`` over ``indices``, in one forward/backward."""
    batch = collate([ds[int(i)] for i in indices])
    model.clear_gradients()
    logits = model(input_ids=paddle.to_tensor(batch["input_ids"]))
    losses = paddle.nn.functional.cross_entropy(
        logits, paddle.to_tensor(batch["labels"]), reduction="none"
    ).reshape([-1])
    w = paddle.to_tensor(weights.astype("float32"))
    ((losses * w).sum() / w.sum()).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return grads


def mean_gap(rec: Any, step: int, ds: Reviews, model: Any, accumulate: str = "samples") -> float:
    """How far the gradient ``rec`` (:func:`make_recorder`) took at ``step`` is from that of the
    mean over the step's samples (``accumulate="tokens"``: weighed by their lengths), on
    ``model`` (of the trained kind) set to the step's recorded weights."""
    indices = np.concatenate(rec.windows[step].indices)
    weights = ds.lengths[indices] if accumulate == "tokens" else np.ones(indices.size)
    model.set_state_dict(rec.weights[step])
    expected = reference_grads(model, ds, indices, weights)
    return max(float(np.abs(rec.grads[step][n] - g).max()) for n, g in expected.items())


def accuracy(prediction: Any) -> dict[str, float]:
    """``compute_metrics`` for the Trainer: the share of argmax predictions that match."""
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def direct_eval(model: Any, ds: Reviews) -> tuple[float, float]:
    """Accuracy and mean cross entropy over the whole set in one forward pass."""
    batch = collate([ds[i] for i in range(len(ds))])
    model.eval()
    with paddle.no_grad():
        logits = model(input_ids=paddle.to_tensor(batch["input_ids"]))
        losses = paddle.nn.functional.cross_entropy(
            logits, paddle.to_tensor(batch["labels"]), reduction="none"
        )
    model.train()
    acc = float((logits.numpy().argmax(-1) == batch["labels"]).mean())
    return acc, float(losses.numpy().mean())


def make_recorder(*, grads: int = 0, stop_at: int | None = None, callback: Any = None) -> Any:
    """A TrainerCallback that records windows, optimizer steps, logs and (the first) gradients.

    ``callback`` is the host's ``TrainerCallback`` class (paddlenlp's when None).
    """
    if callback is None:
        from paddlenlp.trainer import TrainerCallback as callback

    class Recorder(callback):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.windows: list[Any] = []
            self.optimizer_steps = 0
            self.logs: list[dict[str, Any]] = []
            self.weights: list[dict[str, np.ndarray]] = []
            self.grads: list[dict[str, np.ndarray]] = []

        def on_load_data_end(self, args, state, control, inputs=None, **kw):  # type: ignore[no-untyped-def]
            self.windows.append(inputs["window"])

        def on_step_begin(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            if len(self.weights) < grads:
                self.weights.append({k: v.numpy().copy() for k, v in model.state_dict().items()})

        def on_optimizer_begin(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            if len(self.grads) < grads:
                self.grads.append(
                    {
                        n: p.grad.numpy().copy()
                        for n, p in model.named_parameters()
                        if p.grad is not None
                    }
                )

        def on_optimizer_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.optimizer_steps += 1

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            if stop_at is not None and state.global_step == stop_at:
                control.should_training_stop = True  # as if the job ended here
            return control

        def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            self.logs.append(dict(logs or {}))

    return Recorder()
