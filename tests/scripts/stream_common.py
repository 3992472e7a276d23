"""A toy stream shared by the stream test scripts: samples, shards, the collate, the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from toy import Toy

import dynbatch


def samples(n: int) -> list[dict[str, Any]]:
    """Toy's samples as dicts: token ids and the sample's own index."""
    ds = Toy(n)
    return [{"ids": ds.ids[i].tolist(), "index": i} for i in range(n)]


def write_shards(out_dir: Path, n: int, count: int = 5) -> list[Path]:
    rows = samples(n)
    paths = []
    for k, part in enumerate(np.array_split(np.arange(n), count)):
        path = out_dir / f"shard{k}.jsonl"
        path.write_text("".join(json.dumps(rows[i]) + "\n" for i in part))
        paths.append(path)
    return paths


def length(sample: dict[str, Any]) -> int:
    return len(sample["ids"])


def collate(batch: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    ids = dynbatch.Pad(pad_val=0)([np.asarray(s["ids"], dtype="int64") for s in batch])
    return ids, np.asarray([s["index"] for s in batch], dtype="int64")


def stream(out_dir: Path, n: int, mode: str, **kw: Any) -> dynbatch.DynamicBatchIterable:
    """The stream of the scripts: ``mode`` "iterable" (a list) or "shards" (JSONL shards)."""
    args: dict[str, Any] = {
        "length_fn": length,
        "max_cost": 3 * 160,
        "cost": "linear",
        "buffer_size": 64,
        "seed": 7,
    }
    args.update(kw)
    if mode == "shards":
        paths = sorted(out_dir.glob("shard*.jsonl"))
        return dynbatch.DynamicBatchIterable(paths, reader=dynbatch.read_jsonl, **args)
    return dynbatch.DynamicBatchIterable(samples(n), **args)
