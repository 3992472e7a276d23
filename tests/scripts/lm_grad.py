"""Across 2 ranks: one update of token losses is the mean over every loss token of both ranks.

    python -m paddle.distributed.launch --nproc_per_node 2 lm_grad.py OUT_DIR loop|trainer

The tiny causal LM of lm_toy.py trains one update of prompt -> answer pairs (prompts masked)
planned in loss tokens: by the hand loop (GradientAccumulator + dynbatch.token_loss) or by
DynamicBatchTrainer (token_cross_entropy). Each rank recomputes, from the same weights, the
gradient of the mean over every loss token of the update's samples on both ranks in one
pass, and the stock per-micro-batch mean, and writes OUT_DIR/lm_grad{rank}.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
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

import dynbatch

PLAN: dict[str, Any] = {"batch_size": 8, "update_unit": "tokens", "seed": 3}


def hand_loop(ds: Pairs) -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """One update by the hand loop: its sampler, the weights before it and its gradients."""
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, loss_tokens=ds.loss_tokens, **PLAN
    )
    net = tiny_lm()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    model = paddle.DataParallel(net)
    grads: dict[str, np.ndarray] = {}

    class Spy(paddle.optimizer.SGD):  # type: ignore[misc]
        def step(self) -> None:
            grads.update(
                {n: p.grad.numpy().copy() for n, p in net.named_parameters() if p.grad is not None}
            )
            super().step()

    acc = dynbatch.GradientAccumulator(
        model, Spy(0.5, parameters=model.parameters()), sampler=sampler
    )
    micro = 0
    for idx in sampler:
        batch = collate([ds[i] for i in idx])
        with acc.accumulate():
            logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
            acc.backward(*dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"])))
        micro += 1
        if acc.optimizer_steps:
            break
    return sampler, before, grads, micro


def trainer(ds: Pairs, out: Path) -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """One update by DynamicBatchTrainer, its gradients seen at on_optimizer_begin."""
    from trainer_toy import make_recorder

    rec = make_recorder(grads=1)
    args = {"per_device_train_batch_size": 8, "max_steps": 1, "seed": 3}
    run = lm_trainer(out / "run", ds, args=args, callbacks=[rec])
    run.train()
    window = rec.windows[0]
    return run.train_sampler, rec.weights[0], rec.grads[0], window.stop - window.start


def main() -> None:
    out, runner = Path(sys.argv[1]), sys.argv[2]
    dist.init_parallel_env()
    ds = Pairs(96, seed=11)
    sampler, before, grads, micro = hand_loop(ds) if runner == "loop" else trainer(ds, out)
    sharded = sampler.epoch_plan(0)
    end = int(sharded.window_ends[0])
    rows = [k for k in range(end * 2) if not sharded.is_padding[k]]
    union = np.concatenate([sharded.plan[k] for k in rows])
    ref = tiny_lm()
    ref.set_state_dict(before)
    expected = reference_grads(ref, ds, union)
    stock = stock_grads(ref, ds, [sharded.plan[k] for k in rows])
    (out / f"lm_grad{dist.get_rank()}.json").write_text(
        json.dumps(
            {
                "max_abs_diff": worst(grads, expected),
                "stock_diff": worst(stock, expected),
                "scale": scale(expected),
                "micro_batches": micro,
                "loss_tokens": int(ds.loss_tokens[union].sum()),
            }
        )
    )


if __name__ == "__main__":
    main()
