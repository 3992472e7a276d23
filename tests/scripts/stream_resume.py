"""Train one epoch of a DynamicBatchIterable with checkpoints; optionally SIGKILL itself.

    python stream_resume.py OUT_DIR WORKERS MODE [--kill-at STEP]

A checkpoint (model, optimizer, accumulator, stream state, and the indices trained on since
the epoch began) is written every 3 steps; on start, an existing one is resumed. The indices
trained on, in order, go to OUT_DIR/trained.json and the final parameters to params.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
from pathlib import Path

import numpy as np
import paddle
from stream_common import collate, stream
from toy import Bag

import dynbatch

EPOCH = 3
N = 257


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("workers", type=int)
    parser.add_argument("mode", choices=["iterable", "shards"])
    parser.add_argument("--kill-at", type=int, default=None)
    args = parser.parse_args()
    ckpt = args.out_dir / "ckpt.pkl"
    paddle.seed(0)
    it = stream(args.out_dir, N, args.mode, num_replicas=1, rank=0)
    model = Bag()
    opt = paddle.optimizer.Adam(1e-3, parameters=model.parameters())
    acc = dynbatch.GradientAccumulator(model, opt, sampler=it, target=40)
    trained: list[int] = []
    if ckpt.exists():
        with open(ckpt, "rb") as fh:
            state = pickle.load(fh)
        model.set_state_dict(state["model"])
        opt.set_state_dict(state["optimizer"])
        it.load_state_dict(state["stream"])
        acc.set_state_dict(state["acc"])  # after the model's weights
        trained = state["trained"]
    it.set_epoch(EPOCH)  # as a loop would: keeps the loaded position
    loader = it.loader(collate, num_workers=args.workers)
    for done, (ids, index) in enumerate(loader, 1):
        with acc.accumulate():
            losses = paddle.nn.functional.cross_entropy(
                model(ids), (index % 2).unsqueeze(-1), reduction="none"
            )
            acc.backward(losses.sum(), count=ids.shape[0])
        trained.extend(index.numpy().tolist())
        if done % 3 == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "acc": acc.state_dict(),
                "stream": it.state_dict(),
                "trained": trained,
            }
            with open(ckpt.with_suffix(".tmp"), "wb") as fh:
                pickle.dump(state, fh)
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
        if args.kill_at is not None and done == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    (args.out_dir / "trained.json").write_text(json.dumps(trained))
    params = {k: np.asarray(v.numpy()).ravel().tolist() for k, v in model.state_dict().items()}
    (args.out_dir / "params.json").write_text(json.dumps(params))


if __name__ == "__main__":
    main()
