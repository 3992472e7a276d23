"""A tiny paddlenlp BART and (source, target) pairs, for the Trainer on encoder-decoders.

Imported by tests/test_trainer_seq2seq.py and by the scripts it runs in their own processes
(trainer_resume.py's ``s2s``, seq2seq_ddp.py), so all of them train the same way. The
samples carry their decoder inputs (the target shifted right, one sample at a time) and the
batches are ``dynbatch.Dict`` of ``dynbatch.Pad``: each side padded to its own longest, the
labels with -100.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

import dynbatch

VOCAB = 100
PAD = 0
START = 2  # BART's decoder_start_token_id (its eos)
IGNORE = -100
FIELDS = ("input_ids", "decoder_input_ids", "labels")
#: T5 attends to the source's padding unless told: its samples carry an attention_mask too
MASKED = ("input_ids", "attention_mask", "decoder_input_ids", "labels")
_PADS = {
    fields: dynbatch.Dict({k: dynbatch.Pad(IGNORE if k == "labels" else PAD) for k in fields})
    for fields in (FIELDS, MASKED)
}


def tiny_t5(seed: int = 0, dropout: float = 0.0) -> Any:
    """paddlenlp's T5ForConditionalGeneration, d_model 32, one layer each side: built."""
    from paddlenlp.transformers import T5Config, T5ForConditionalGeneration

    paddle.seed(seed)
    config = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        relative_attention_num_buckets=8,
        dropout_rate=dropout,
        pad_token_id=PAD,
        eos_token_id=1,
        decoder_start_token_id=START,
        feed_forward_proj="relu",
    )
    return T5ForConditionalGeneration(config)


def tiny_bart(seed: int = 0, dropout: float = 0.0) -> Any:
    """paddlenlp's BartForConditionalGeneration, d_model 32, one layer each side: built."""
    from paddlenlp.transformers import BartConfig, BartForConditionalGeneration

    paddle.seed(seed)
    config = BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=START,
        decoder_start_token_id=START,
        dropout=dropout,
        attention_dropout=dropout,
        activation_dropout=dropout,
    )
    return BartForConditionalGeneration(config)


class Translations(paddle.io.Dataset):  # type: ignore[misc]
    """``{"input_ids", "decoder_input_ids", "labels"}``: sources of 3..40 tokens, targets of
    about 0.5 to 1.5 times as many (2..48), random ids from 3 up."""

    def __init__(self, n: int, seed: int = 0, *, attention_mask: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.attention_mask = attention_mask
        src = np.clip(np.ceil(rng.lognormal(2.3, 0.6, n)), 3, 40).astype(np.int64)
        tgt = np.clip(np.ceil(src * rng.uniform(0.5, 1.5, n)), 2, 48).astype(np.int64)
        self.lengths = np.stack([src, tgt], axis=1)
        self.sources = [rng.integers(3, VOCAB, k).astype("int64") for k in src]
        self.targets = [rng.integers(3, VOCAB, k).astype("int64") for k in tgt]

    def __getitem__(self, i: int) -> dict[str, Any]:
        target = self.targets[i]
        sample = {"input_ids": self.sources[i]}
        if self.attention_mask:
            sample["attention_mask"] = np.ones(self.sources[i].size, dtype="int64")
        sample["decoder_input_ids"] = np.concatenate([[START], target[:-1]]).astype("int64")
        sample["labels"] = target
        return sample

    def __len__(self) -> int:
        return len(self.sources)


class SourceTarget(paddle.io.Dataset):  # type: ignore[misc]
    """``translations``' pairs as ``{"source", "target"}`` token ids, for
    ``dynbatch.Seq2SeqCollator`` (which shifts the target itself)."""

    def __init__(self, translations: Translations) -> None:
        self.translations = translations

    def __getitem__(self, i: int) -> dict[str, Any]:
        pairs = self.translations
        return {"source": pairs.sources[i], "target": pairs.targets[i]}

    def __len__(self) -> int:
        return len(self.translations)


def pair_lengths(sample: dict[str, Any]) -> tuple[int, int]:
    """The Trainer's ``length_fn``: a sample's (source, target) lengths."""
    return len(sample["input_ids"]), len(sample["labels"])


def collate(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each field padded to its own longest: ids (and the mask) with 0, labels with -100."""
    fields = MASKED if "attention_mask" in samples[0] else FIELDS
    return dict(zip(fields, _PADS[fields](samples), strict=True))


def s2s_trainer(out: Any, ds: Translations, *, dropout: float = 0.0, **kw: Any) -> Any:
    """DynamicBatchTrainer on the tiny BART with the defaults: the fixed batch's recipe on the
    pairs (``length_fn`` returns them), the loss its default (the target tokens' mean).

    ``args`` (a dict) changes the TrainingArguments (8 pairs a batch); other keywords go to
    the Trainer.
    """
    from trainer_toy import make_args

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    args = make_args(out, **{"per_device_train_batch_size": 8, **kw.pop("args", {})})
    return DynamicBatchTrainer(
        model=kw.pop("model", None) or tiny_bart(dropout=dropout),
        args=args,
        train_dataset=ds,
        data_collator=kw.pop("data_collator", collate),
        length_fn=kw.pop("length_fn", pair_lengths),
        **kw,
    )


def reference_grads(model: Any, ds: Translations, indices: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of the mean over every target token of ``indices``, in one forward/backward
    (one batch padded to its longest source and target)."""
    batch = {k: paddle.to_tensor(v) for k, v in collate([ds[int(i)] for i in indices]).items()}
    model.clear_gradients()
    labels = batch.pop("labels")
    outputs = model(**batch)
    logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    losses = paddle.nn.functional.cross_entropy(
        logits, labels.unsqueeze(-1), ignore_index=IGNORE, reduction="none"
    ).squeeze(-1)
    mask = (labels != IGNORE).astype("float32")
    ((losses * mask).sum() / mask.sum()).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return grads


def grad_gap(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """The largest difference between two sets of gradients, over every parameter."""
    assert set(got) == set(expected), "the same parameters have gradients"
    return max(float(np.abs(got[n] - g).max()) for n, g in expected.items())


def target_token_loss(model: Any, ds: Translations) -> float:
    """The mean cross entropy over every target token of ``ds``, in one batch, without grad."""
    batch = {k: paddle.to_tensor(v) for k, v in collate([ds[i] for i in range(len(ds))]).items()}
    model.eval()
    with paddle.no_grad():
        logits = model(input_ids=batch["input_ids"], decoder_input_ids=batch["decoder_input_ids"])
        losses = paddle.nn.functional.cross_entropy(
            logits, batch["labels"].unsqueeze(-1), ignore_index=IGNORE, reduction="sum"
        )
    model.train()
    return float(losses) / int((batch["labels"] != IGNORE).sum())
