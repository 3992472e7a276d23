"""A hand-written DataParallel loop that checkpoints, dies and resumes, on any number of ranks;
run under `python -m paddle.distributed.launch --nproc_per_node R resume_ranks.py OUT WORKERS`.

    [--kill-at STEP]   SIGKILL every rank once STEP batches of the epoch are done
    [--stop-at STEP]   leave cleanly once STEP batches are done (a checkpoint is written there)

Updates are GLOBAL samples whatever the number of ranks (``batch_size=GLOBAL // ranks``), so
a checkpoint resumes on another number of ranks (NOTE [ resume on another number of ranks ]
in dynbatch.plan.reshard). A checkpoint is written every 3 batches: rank 0 writes the model, the
optimizer and the sampler state (ckpt.pkl); each rank writes the batches it trained since the
epoch began (trained{rank}.pkl), each atomically. A run that finds them resumes. At the end
each rank writes its batches (trained{rank}.json) and rank 0 the parameters (params.json).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import paddle
import paddle.distributed as dist
from launched import finish
from toy import Bag, Toy, per_sample_loss

import dynbatch

EPOCH, GLOBAL, EVERY = 2, 24, 3


def save(path: Path, value: Any) -> None:
    with open(path.with_suffix(".tmp"), "wb") as fh:
        pickle.dump(value, fh)
    os.replace(path.with_suffix(".tmp"), path)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("workers", type=int)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--stop-at", type=int, default=None)
    args = parser.parse_args()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt, mine = args.out_dir / "ckpt.pkl", args.out_dir / f"trained{rank}.pkl"
    paddle.seed(0)
    ds = Toy(157)
    sampler = dynbatch.DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, batch_size=GLOBAL // world, seed=11
    )
    model = paddle.DataParallel(Bag())
    opt = paddle.optimizer.Adam(1e-2, parameters=model.parameters())
    trained: list[list[int]] = []  # the batches of this epoch, in order
    done = 0  # batches of this epoch finished
    if ckpt.exists():
        with open(ckpt, "rb") as fh:
            state = pickle.load(fh)
        model.set_state_dict(state["model"])
        opt.set_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        if state["sampler"]["num_replicas"] == world:  # else the rest of the epoch is dealt anew
            done = state["sampler"]["position"]
            with open(mine, "rb") as fh:
                trained = pickle.load(fh)
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
        trained.append(index.numpy().tolist())
        done += 1
        if done % EVERY == 0:
            save(mine, trained)
            if rank == 0:
                save(
                    ckpt,
                    {
                        "model": model.state_dict(),
                        "optimizer": opt.state_dict(),
                        "sampler": sampler.state_dict(consumed_batches=done),
                    },
                )
            if world > 1:
                dist.barrier()  # every rank's files are written before any dies
        if done == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if done == args.stop_at:
            break
    (args.out_dir / f"trained{rank}.json").write_text(json.dumps(trained))
    if rank == 0:
        params = {k: v.numpy().ravel().tolist() for k, v in model.state_dict().items()}
        (args.out_dir / "params.json").write_text(json.dumps(params))
    if world > 1:  # one rank has no process group to wait on
        finish()


if __name__ == "__main__":
    main()
