"""Train one epoch with checkpoints; optionally SIGKILL itself mid-epoch.

    python resume_train.py OUT_DIR WORKERS [--kill-at STEP]

A checkpoint (model, optimizer, sampler state, and the indices trained on since the
epoch began) is written every 3 steps. On start, an existing checkpoint is resumed.
The final list of trained indices goes to OUT_DIR/trained.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
from pathlib import Path

import paddle
from toy import Bag, Toy, per_sample_loss

import dynbatch

EPOCH = 3


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("workers", type=int)
    parser.add_argument("--kill-at", type=int, default=None)
    args = parser.parse_args()
    ckpt = args.out_dir / "ckpt.pkl"
    paddle.seed(0)
    ds = Toy(257)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=3 * 160**2, seed=11)
    model = Bag()
    opt = paddle.optimizer.Adam(1e-3, parameters=model.parameters())
    sampler.set_epoch(EPOCH)
    trained: list[int] = []
    done = 0  # batches of this epoch finished
    if ckpt.exists():
        with open(ckpt, "rb") as fh:
            state = pickle.load(fh)
        model.set_state_dict(state["model"])
        opt.set_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        trained, done = state["trained"], state["sampler"]["position"]
    sampler.set_epoch(EPOCH)  # as a loop would: keeps the loaded position
    loader = paddle.io.DataLoader(
        ds,
        batch_sampler=sampler,
        num_workers=args.workers,
        collate_fn=dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack()),
    )
    for ids, index in loader:
        per_sample_loss(model, ids, index).mean().backward()
        opt.step()
        opt.clear_grad()
        trained.extend(index.numpy().tolist())
        done += 1
        if done % 3 == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "sampler": sampler.state_dict(consumed_batches=done),
                "trained": trained,
            }
            with open(ckpt.with_suffix(".tmp"), "wb") as fh:
                pickle.dump(state, fh)
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
        if args.kill_at is not None and done == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    (args.out_dir / "trained.json").write_text(json.dumps(trained))


if __name__ == "__main__":
    main()
