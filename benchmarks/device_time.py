"""Each plan's epoch replayed on a device's measured step times, against the fixed batch.

    python benchmarks/device_time.py [--time-table FILE] [--attention eager]
        [--max-lens 128,256,512] [--batch-sizes 16,32,64] [--epochs 8] [--fill 0.5]
        [--batch-size-multiple 1]

A step-time table (``--time-table``: JSON with columns n, L, step_s, as the measured H100
file ``../shared/data/h100_bert_base_step_times.json`` or one you measured) prices every
micro-batch of a plan by its shape; an epoch's time is the sum. The corpus is ChnSentiCorp
(bert-base-chinese WordPiece lengths + [CLS]/[SEP], cut at --max-len). For each length and
fixed batch size B it prints, averaged over --epochs epochs (each a new shuffle):

* ``fixed``: a shuffled batch of B, every batch an update;
* ``recipe``: ``like_fixed(lengths, B)`` (the CPU's padding-free split);
* ``recipe + time``: ``like_fixed(lengths, B, time_model=table.fit())``;
* ``recipe + time, grouped``: the same with ``group_by_length=True`` (updates of near-equal
  lengths, drawn as Hugging Face's sampler draws them);
* ``fill``: ``fill_device(..., fraction=--fill, batch_size=B)`` on the fitted model, within
  the table's largest measured batch (fewer, larger updates);
* ``n*L^2``: the study's rule at the fixed batch's worst (B * max_len**2), a batch an update;
* ``group_by_length``: Hugging Face's length-grouped sampler (mega-batches of 50 * B
  sorted by length, cut into batches of B);
* ``max tokens``: a fairseq-style budget of B * max_len tokens, length-sorted batches;
* ``best split``: the fixed batch's updates, each cut at the least time *on the table*
  (an exhaustive search over length-sorted cuts): the limit for the fixed batch's updates.

Packed (rows of at most ``max_len`` tokens, each sample alone in its row; a micro-batch of
``R`` rows as wide as its fullest row ``W`` is priced as ``R`` sequences of ``W``: dense
attention over the row, an upper bound on a block-diagonal kernel). Every packed plan runs the
fixed batch's updates (``ceil(N / B)`` of ``B`` samples, NOTE [ packed updates ]):

* ``packed, chosen (table)``: ``choose_packing(lens, max_len, batch_size=B,
  time_model=table, max_rows=B)`` (the samplers' planner on one rank): each update run packed,
  split or whole, whichever the table prices fastest (NOTE [ choosing packing per update ]);
  micro-batches of at most B rows, each run as rows or padded, whichever is faster
  (NOTE [ a micro-batch's layout ]), and replayed as it runs;
* ``packed, chosen (fit)``: the same, chosen on the fitted model, replayed on the table;
* ``packed, always``: ``plan_packs(..., max_rows=B)``, every update packed, its micro-batches'
  rows as wide as their fullest (``PackPlan.rows_per_micro_batch``, ``PackPlan.widths``);
* ``peer: per-update FFD``: the fixed batch's updates, each packed alone by first-fit
  decreasing and its rows padded to ``max_len`` (as TRL's and axolotl's packers pack a batch),
  one micro-batch of its rows;
* ``peer: PaddleNLP zero padding``: next-fit in arrival order (the fixed shuffle), the
  rows cut into the fixed batch's update count (equal rows each: not the fixed batch's
  samples); ``peer: PaddleNLP greedy 500``: its ``greedy_intokens`` (500-sample buffers, the
  roomiest open row) cut the same way.

After the tables, one summary puts side by side, as the speed over the fixed batch's epoch:
packed chosen per update (on the table), ``group_by_length`` and per-update FFD, for every
``max_len`` and B. The shipped table is BERT-base in bf16 with *eager* attention (the attention
matrix materialised); with fused attention (SDPA) short steps are bound by kernel launches and
packing's gains differ (on such an H100 table, not shipped, ``group_by_length`` matched or beat
packing in most cells at 128-512 tokens): ``--attention`` names the attention of another table.

It asserts nothing. Replayed times are the device's step-time shape, not a run on it.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import SHARED, print_table
from packing import first_fit_decreasing, next_fit, worst_fit_buffers

import dynbatch
from dynbatch.plan.epochs import plan_epoch
from dynbatch.plan.splits import shuffled, split_update
from dynbatch.plan.steptime import StepTimeTable
from dynbatch.plan.text import wordpiece_counter

EAGER = (
    " (the attention matrix materialised, as paddle's BERT does). These gains assume it: with"
    " fused attention (SDPA) a short step is bound by kernel launches and rows of max_len cost"
    " more than short padded batches (on such an H100 table, not shipped, group_by_length"
    " matched or beat packing in most cells at 128-512 tokens)"
)
#: The summary's columns: its heading -> the plan's name in each table.
SUMMARY = {
    "fixed": "fixed",
    "packed, chosen per update": "packed, chosen (table)",
    "group_by_length": "group_by_length",
    "per-update FFD (TRL, axolotl)": "peer: per-update FFD",
}

Batches = list[np.ndarray]  # one epoch: index arrays, with update ends beside
Shapes = tuple[np.ndarray, np.ndarray]  # one epoch as run: each step's n (rows) and length


def wordpiece_lengths(data: Path, vocab: Path) -> np.ndarray:
    count = wordpiece_counter(vocab)
    with open(data, encoding="utf-8", newline="") as fh:
        return np.array([count(r["review"] or "") + 2 for r in csv.DictReader(fh)])


def fixed(lens: np.ndarray, batch: int, epoch: int) -> tuple[Batches, int]:
    """A shuffled fixed batch; its shuffle is the one the time-split recipe draws updates from
    (seed 0), so the two compare update by update."""
    perm = shuffled(np.arange(lens.size), 0, epoch)
    batches = [perm[i : i + batch] for i in range(0, lens.size, batch)]
    return batches, len(batches)


def group_by_length(lens: np.ndarray, batch: int, epoch: int) -> tuple[Batches, int]:
    """Hugging Face's ``LengthGroupedSampler``: mega-batches of 50 * B sorted by length."""
    perm = np.random.default_rng([8, epoch]).permutation(lens.size)
    mega = 50 * batch
    batches = []
    for i in range(0, lens.size, mega):
        chunk = perm[i : i + mega]
        chunk = chunk[np.argsort(-lens[chunk], kind="stable")]
        batches += [chunk[j : j + batch] for j in range(0, chunk.size, batch)]
    return batches, len(batches)


def max_tokens(lens: np.ndarray, budget: int, epoch: int) -> tuple[Batches, int]:
    """fairseq's ``batch_by_size``: length-sorted, n * longest <= budget, batches shuffled."""
    rng = np.random.default_rng([9, epoch])
    order = np.lexsort((rng.random(lens.size), lens))
    batches, start, longest = [], 0, 0
    for k, i in enumerate(order.tolist()):
        longest = max(longest, int(lens[i]))
        if (k - start + 1) * longest > budget:
            batches.append(order[start:k])
            start, longest = k, int(lens[i])
    batches.append(order[start:])
    return [batches[j] for j in rng.permutation(len(batches))], len(batches)


def planned(lens: np.ndarray, options: dynbatch.PlanOptions) -> Callable[..., tuple[Batches, int]]:
    def plan(_: np.ndarray, __: int, epoch: int) -> tuple[Batches, int]:
        sp = plan_epoch(lens, options, epoch)
        updates = sp.num_steps if sp.window_ends is None else len(sp.window_ends)
        return list(sp.plan), updates

    return plan


def best_split(
    table: StepTimeTable, lens: np.ndarray, batch: int, epoch: int
) -> tuple[Batches, int]:
    """The fixed batch's updates, each cut at the least time on the table itself."""
    batches, updates = fixed(lens, batch, epoch)
    out: Batches = []
    for members in batches:
        members = members[np.argsort(lens[members])]
        row = lens[members][None, :]
        cuts = split_update(row, np.full(row.shape, members.size), table)[0]
        stops = np.flatnonzero(cuts) + 1
        out += [members[a:b] for a, b in zip(np.r_[0, stops[:-1]], stops, strict=True)]
    return out, updates


def packed_chosen(step_time: object, max_len: int) -> Callable[..., tuple[Shapes, int]]:
    def plan(lens: np.ndarray, batch: int, epoch: int) -> tuple[Shapes, int]:
        c = dynbatch.choose_packing(
            lens, max_len, batch_size=batch, time_model=step_time, max_rows=batch, epoch=epoch
        )
        return c.step_shapes, c.num_updates

    return plan


def packed_always(lens: np.ndarray, batch: int, epoch: int, max_len: int) -> tuple[Shapes, int]:
    """Every update packed: each micro-batch's rows, as wide as its fullest."""
    p = dynbatch.plan_packs(lens, max_len, batch_size=batch, max_rows=batch, epoch=epoch)
    return (p.rows_per_micro_batch, p.widths), p.num_updates


def per_update_ffd(lens: np.ndarray, batch: int, epoch: int, max_len: int) -> tuple[Shapes, int]:
    """TRL / axolotl packing a batch: each fixed update alone, first-fit decreasing, its rows
    padded to ``max_len``."""
    batches, updates = fixed(lens, batch, epoch)
    rows = np.array([first_fit_decreasing(lens[b], max_len) for b in batches])
    return (rows, np.full(rows.size, max_len)), updates


def rows_in_updates(
    packer: Callable[[np.ndarray, int], int], max_len: int
) -> Callable[..., tuple[Shapes, int]]:
    """A dataset packer in arrival order (the fixed shuffle), its rows cut into the fixed
    batch's update count, equal rows each (a DataLoader over the packed rows)."""

    def plan(lens: np.ndarray, batch: int, epoch: int) -> tuple[Shapes, int]:
        order = shuffled(np.arange(lens.size), 0, epoch)
        total = packer(lens[order], max_len)
        updates = -(-lens.size // batch)
        rows = np.array([a.size for a in np.array_split(np.arange(total), updates)])
        return (rows, np.full(rows.size, max_len)), updates

    return plan


def replay(
    batches: Batches | Shapes, lens: np.ndarray, table: StepTimeTable
) -> tuple[float, float, int, int]:
    """Seconds of the epoch, its padding efficiency, its largest padded batch in tokens, and
    its micro-batches; ``batches`` are index arrays, or the shapes of packed steps."""
    if isinstance(batches, tuple):
        n, longest = batches
    else:
        n = np.array([b.size for b in batches])
        longest = np.array([int(lens[b].max()) for b in batches])
    seconds = float(np.asarray(table(n, longest)).sum())
    efficiency = float(lens.sum() / (n * longest).sum()) if n.size else 0.0
    return seconds, efficiency, int((n * longest).max()), int(n.size)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    shipped = str(SHARED / "h100_bert_base_step_times.json")
    parser.add_argument("--time-table", default=shipped)
    parser.add_argument(
        "--attention",
        default=None,
        help="the attention the table was measured with (the shipped table's: eager)",
    )
    parser.add_argument("--data-file", default=str(SHARED / "chnsenticorp_htl_all.csv"))
    parser.add_argument("--vocab", default=str(SHARED / "bert-base-chinese-vocab.txt"))
    parser.add_argument("--max-lens", default="128,256,512")
    parser.add_argument("--batch-sizes", default="16,32,64")
    parser.add_argument("--epochs", type=int, default=8, help="epochs averaged (new shuffles)")
    parser.add_argument("--fill", type=float, default=0.5)
    parser.add_argument(
        "--batch-size-multiple", type=int, default=1, help="the recipes' batch_size_multiple"
    )
    args = parser.parse_args()
    paths = [Path(args.time_table), Path(args.data_file), Path(args.vocab)]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"skipped: {missing[0]} not found (the benchmarks read ../shared/data)")
        return 1 if os.environ.get("CI", "").lower() in ("1", "true", "yes") else 0
    table = StepTimeTable.load(args.time_table)
    model = table.fit()
    table_name = Path(args.time_table).name
    attention = args.attention or ("eager" if args.time_table == shipped else "not given")
    print(f"step times: {table_name} ({table.n.size} shapes); fitted {model}", flush=True)
    print(f"attention: {attention}{EAGER if attention == 'eager' else ''}", flush=True)
    summary: list[list[str]] = []
    words = wordpiece_lengths(Path(args.data_file), Path(args.vocab))
    largest = int((table.n * table.lengths).max())  # the table's largest measured batch
    for max_len in (int(v) for v in args.max_lens.split(",")):
        lens = np.minimum(words, max_len)
        for batch in (int(v) for v in args.batch_sizes.split(",")):
            multiple = {"batch_size_multiple": args.batch_size_multiple}
            recipe = dynbatch.like_fixed(lens, batch, **multiple)
            timed = dynbatch.like_fixed(lens, batch, time_model=model, **multiple)
            grouped = dynbatch.like_fixed(
                lens, batch, time_model=model, group_by_length=True, **multiple
            )
            fill = dynbatch.fill_device(
                lens, model, max_cost=largest, cost="linear", fraction=args.fill, batch_size=batch
            )
            study = dynbatch.PlanOptions(max_cost=batch * max_len**2, cost="quadratic")
            plans: dict[str, Callable[..., tuple[Batches | Shapes, int]]] = {
                "fixed": fixed,
                "recipe": planned(lens, recipe),
                "recipe + time": planned(lens, timed),
                "recipe + time, grouped": planned(lens, grouped),
                f"fill {args.fill:g}": planned(lens, fill),
                "n*L^2": planned(lens, study),
                "group_by_length": group_by_length,
                "max tokens": lambda ln, b, e, top=max_len: max_tokens(ln, b * top, e),
                "best split": lambda ln, b, e: best_split(table, ln, b, e),
                "packed, chosen (table)": packed_chosen(table, max_len),
                "packed, chosen (fit)": packed_chosen(model, max_len),
                "packed, always": lambda ln, b, e, top=max_len: packed_always(ln, b, e, top),
                "peer: per-update FFD": lambda ln, b, e, top=max_len: per_update_ffd(ln, b, e, top),
                "peer: PaddleNLP zero padding": rows_in_updates(next_fit, max_len),
                "peer: PaddleNLP greedy 500": rows_in_updates(worst_fit_buffers, max_len),
            }
            rows, base, speed = [], 0.0, {}
            for name, plan in plans.items():
                runs = [plan(lens, batch, e) for e in range(args.epochs)]
                measured = [replay(b, lens, table) for b, _ in runs]
                seconds = float(np.mean([m[0] for m in measured]))
                base = base or seconds
                speed[name] = base / seconds
                worst = max(m[2] for m in measured)
                rows.append(
                    [
                        name,
                        f"{seconds:.2f}",
                        f"{base / seconds:.2f}x",
                        f"{np.mean([u for _, u in runs]):.0f}",
                        f"{np.mean([m[3] for m in measured]):.0f}",
                        f"{np.mean([m[1] for m in measured]):.3f}",
                        f"{worst / (batch * max_len):.2f}",
                    ]
                )
            print(f"\n== max_len {max_len}, fixed batch {batch}, {lens.size} reviews", flush=True)
            print_table(
                [
                    "plan",
                    "epoch s (table)",
                    "speed vs fixed",
                    "updates",
                    "micro-batches",
                    "padding eff.",
                    "largest batch / B*max_len",
                ],
                rows,
            )
            summary.append(
                [str(max_len), str(batch), *(f"{speed[k]:.2f}x" for k in SUMMARY.values())]
            )
    print(
        f"\n== speed over the fixed batch's epoch, replayed on {table_name} ({attention} "
        f"attention), mean of {args.epochs} epochs: packed and per-update FFD run the fixed "
        "batch's updates; group_by_length as many, of near-equal lengths (not random draws)",
        flush=True,
    )
    print_table(["max_len", "B", *SUMMARY], summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
