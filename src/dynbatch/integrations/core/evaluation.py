"""Evaluation on dynamic batches: the eval sampler, the loop and the Trainer's overrides.

NOTE [ evaluation with unequal batches ]
    Evaluation batches are dynamic too (longest first, every sample once,
    none over budget left out), so ranks hold batches of different sizes and
    paddlenlp's per-batch ``all_gather`` of equal shapes would hang or crash.
    Each rank evaluates its own batches; the loss is one all-reduce of
    ``[sum, count]`` and the predictions (after ``preprocess_logits_for_metrics``,
    per batch, as paddlenlp calls it), labels and sample indices are gathered
    once as objects, ordered by sample index and passed whole to
    ``compute_metrics`` on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.lengths import check_plan_lengths
from ...plan.options import PlanOptions
from .host import HostBase
from .losses import loss_and_count
from .run import split_batch

__all__ = ["EvalSamplers", "EvaluationOverrides", "check_eval_lengths", "evaluate"]


def _checked_eval_lengths(dataset: Any, lengths: Any, name: str | None) -> NDArray[np.int64]:
    """Eval lengths checked when the trainer is made, not after an epoch of training."""
    label = "eval_lengths" if name is None else f"eval_lengths[{name!r}]"
    lens = check_plan_lengths(lengths, name=label)  # (source, target) pairs too
    if hasattr(dataset, "__len__") and len(dataset) != len(lens):
        raise InputError(
            f"{label} has {len(lens)} entries but the eval dataset has {len(dataset)} samples; "
            "they must match one to one"
        )
    return lens


def check_eval_lengths(eval_dataset: Any, eval_lengths: Any) -> Any:
    """``eval_lengths`` checked against ``eval_dataset`` (one array, or a dict like it)."""
    if eval_lengths is None:
        return None
    if eval_dataset is None:
        raise InputError("eval_lengths were given without an eval_dataset to go with them")
    if isinstance(eval_dataset, Mapping):
        if not isinstance(eval_lengths, Mapping) or set(eval_lengths) != set(eval_dataset):
            raise InputError(
                "eval_dataset is a dict, so eval_lengths must be a dict with the same keys "
                f"({sorted(eval_dataset)}), got {eval_lengths!r:.80}"
            )
        return {
            name: _checked_eval_lengths(eval_dataset[name], eval_lengths[name], name)
            for name in eval_dataset
        }
    return _checked_eval_lengths(eval_dataset, eval_lengths, None)


class EvalSamplers:
    """One dynamic sampler per eval dataset whose lengths are known or measurable."""

    def __init__(
        self, eval_dataset: Any, eval_lengths: Any, length_fn: Any, ref_index: Any
    ) -> None:
        self.eval_dataset, self.lengths = eval_dataset, eval_lengths
        self.length_fn, self.ref_index = length_fn, ref_index
        self._made: list[tuple[Any, DistributedDynamicBatchSampler | None]] = []

    def knows(self, sampler: Any) -> bool:
        return any(sampler is s for _, s in self._made)

    def loader(self, dataset: Any, options: PlanOptions, args: Any, collate_fn: Any) -> Any:
        """``dataset``'s loader of dynamic batches on this rank of ``args``; None where its
        lengths are unknown (paddlenlp's fixed batches then)."""
        if dataset is None:
            return None
        world, rank = args.dataset_world_size, args.dataset_rank
        sampler = self.get(dataset, options, world, rank)
        if sampler is None:
            return None
        return paddle.io.DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate_fn,
            num_workers=args.dataloader_num_workers,
        )

    def get(
        self, dataset: Any, options: PlanOptions, world: int, rank: int
    ) -> DistributedDynamicBatchSampler | None:
        for known, sampler in self._made:
            if known is dataset:
                return sampler
        lengths = None
        if isinstance(self.lengths, Mapping):
            for name, candidate in (self.eval_dataset or {}).items():
                if candidate is dataset:
                    lengths = self.lengths[name]
        elif dataset is self.eval_dataset:
            lengths = self.lengths
        sampler = None
        if lengths is not None or self.length_fn is not None or self.ref_index is not None:
            sampler = DistributedDynamicBatchSampler(
                dataset,
                lengths=lengths,
                length_fn=None if lengths is not None else self.length_fn,
                ref_index=None if lengths is not None else self.ref_index,
                num_replicas=world,
                rank=rank,
                # every sample evaluated once, longest first (an OOM shows at the first batch)
                options=options.replace(
                    order="descending",
                    drop_last=False,
                    equal_epochs=False,
                    oversize="alone",
                    update_size=None,
                    time_model=None,
                    fixed_step_size=None,
                    pack_len=None,  # evaluated unpacked (NOTE [ the Trainer packs ])
                ),
            )
        self._made.append((dataset, sampler))
        return sampler


def evaluate(
    trainer: Any,
    dataloader: Any,
    sampler: DistributedDynamicBatchSampler,
    prediction_loss_only: bool | None,
    ignore_keys: list[str] | None,
    metric_key_prefix: str,
    max_eval_iters: int | None,
) -> Any:
    """``trainer``'s evaluation loop over ``sampler``'s batches (NOTE [ evaluation ... ])."""
    args, host = trainer.args, trainer.host
    nested_concat = host.nested_concat
    if prediction_loss_only is None:
        prediction_loss_only = args.prediction_loss_only
    if ignore_keys is None:
        ignore_keys = list(
            getattr(getattr(trainer.model, "config", None), "keys_to_ignore_at_inference", []) or []
        )
    label_names = trainer.label_names
    preprocess = trainer.preprocess_logits_for_metrics
    model = trainer.model
    model.eval()
    trainer.set_eval_dataloader(dataloader)
    plan, padding = sampler.batches(), sampler.padding_mask()
    total_loss = count = 0.0
    seen: list[NDArray[Any]] = []
    preds: Any = None
    labels: Any = None
    for k, batch in enumerate(dataloader):
        if max_eval_iters is not None and 0 < max_eval_iters <= k:
            break
        if padding[k]:  # a repeat that only evens out the ranks' batch counts
            continue
        indices = np.asarray(plan[k])
        batch, model_inputs = split_batch(
            batch, label_names, trainer.prepare_inputs, trainer.labels_to_model
        )
        has_labels = all(batch.get(name) is not None for name in label_names)
        with paddle.no_grad(), trainer.autocast_smart_context_manager():
            outputs = model(**model_inputs)
            if has_labels:
                losses = trainer.loss_fn(outputs, batch)
                total, n, _ = loss_and_count(losses, indices, sampler.lengths, trainer.accumulate)
                total_loss += float(total.item())
                count += float(n.numpy().sum()) if isinstance(n, paddle.Tensor) else float(n)
        seen.append(indices)
        if not prediction_loss_only:
            batch_labels: Any = None
            if has_labels:
                batch_labels = tuple(batch[name] for name in label_names)
                batch_labels = batch_labels[0] if len(batch_labels) == 1 else batch_labels
            logits = _logits_of(outputs, ignore_keys)
            if preprocess is not None:
                logits = preprocess(logits, batch_labels)
            logits = _numpy(logits)
            preds = logits if preds is None else nested_concat(preds, logits, padding_index=-100)
            if batch_labels is not None:
                lab = _numpy(batch_labels)
                labels = lab if labels is None else nested_concat(labels, lab, padding_index=-100)
        trainer.control = trainer.callback_handler.on_prediction_step(
            args, trainer.state, trainer.control
        )
    order = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    totals = paddle.to_tensor([total_loss, count], dtype="float64")
    if args.dataset_world_size > 1:
        paddle.distributed.all_reduce(totals)
        if not prediction_loss_only:
            gathered: list[Any] = []
            paddle.distributed.all_gather_object(gathered, (order, preds, labels))
            order, preds, labels = _merge(gathered, nested_concat)
    if not prediction_loss_only and order.size:
        unique, first = np.unique(order, return_index=True)
        preds, labels = _take(preds, first), _take(labels, first)
        order = unique
    model.train()
    metrics: dict[str, Any] = {}
    if trainer.compute_metrics is not None and preds is not None and labels is not None:
        label_ids = labels[0] if isinstance(labels, (list, tuple)) else labels
        metrics = dict(
            trainer.compute_metrics(host.eval_prediction(predictions=preds, label_ids=label_ids))
        )
    loss_total, count_total = (float(x) for x in totals.numpy())
    if count_total > 0:
        metrics["loss"] = loss_total / count_total
    metrics = {
        (k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}"): v
        for k, v in metrics.items()
    }
    num_samples = int(order.size) if not prediction_loss_only else len(sampler.lengths)
    return host.eval_loop_output(
        predictions=preds, label_ids=labels, metrics=metrics, num_samples=num_samples
    )


def _numpy(values: Any) -> Any:
    if isinstance(values, (list, tuple)):
        return type(values)(_numpy(v) for v in values)
    if isinstance(values, paddle.Tensor):
        return values.detach().numpy()
    return np.asarray(values)


def _logits_of(outputs: Any, ignore_keys: list[str]) -> Any:
    """The model's outputs as predictions (tensors), as the Trainer's prediction_step picks them."""
    if isinstance(outputs, Mapping):
        logits: Any = tuple(v for k, v in outputs.items() if k not in [*ignore_keys, "loss"])
    elif isinstance(outputs, (tuple, list)):
        logits = tuple(outputs)
    else:
        logits = outputs
    if isinstance(logits, tuple) and len(logits) == 1:
        logits = logits[0]
    return logits


def _merge(gathered: list[Any], nested_concat: Any) -> tuple[NDArray[Any], Any, Any]:
    order = np.concatenate([g[0] for g in gathered])
    merged: list[Any] = [None, None]
    for _, preds, labels in gathered:
        for slot, part in enumerate((preds, labels)):
            if part is not None:
                merged[slot] = (
                    part
                    if merged[slot] is None
                    else nested_concat(merged[slot], part, padding_index=-100)
                )
    return order, merged[0], merged[1]


def _take(values: Any, rows: NDArray[Any]) -> Any:
    if values is None:
        return None
    if isinstance(values, (list, tuple)):
        return type(values)(_take(v, rows) for v in values)
    return np.asarray(values)[rows]


class EvaluationOverrides(HostBase):  # type: ignore[misc]
    """The ``Trainer``'s evaluation methods on dynamic batches: a mixin of the core, before the
    host's ``Trainer`` (NOTE [ one core, one host per adapter ] in :mod:`.host`)."""

    options: PlanOptions
    _eval_samplers: EvalSamplers

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """Dynamic batches if eval lengths are known (NOTE [ evaluation with unequal batches ])."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        loader = self._eval_samplers.loader(dataset, self.options, self.args, self.data_collator)
        return super().get_eval_dataloader(eval_dataset) if loader is None else loader

    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        max_eval_iters: int | None = -1,
    ) -> Any:
        """Per-rank evaluation of dynamic batches, gathered once (NOTE [ evaluation ... ])."""
        sampler = getattr(dataloader, "batch_sampler", None)
        kw: dict[str, Any] = {
            "prediction_loss_only": prediction_loss_only,
            "ignore_keys": ignore_keys,
            "metric_key_prefix": metric_key_prefix,
            "max_eval_iters": max_eval_iters,
        }
        if sampler is None or not self._eval_samplers.knows(sampler):
            return super().evaluation_loop(dataloader, description, **kw)
        return evaluate(self, dataloader, sampler, **kw)
