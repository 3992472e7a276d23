"""How long ranks wait for each other, per update, from the samplers' own plans.

    python benchmarks/rank_balance.py [--batch-size 8] [--pack-len 2048] [--ranks 8,64]

A data-parallel update lasts as long as its slowest rank. On a padding-free kernel (varlen,
FlashMask) a rank's compute for its samples grows with ``ΣL² + 512·ΣL`` (attention, and the
per-token work of a model of hidden size 512 in the same units), not with its tokens. For each
update of an epoch this takes that work on every rank, from the samples the plan gives the
rank, and reports over the epoch: ``Σ max / Σ mean`` (the time the slowest rank sets against
the time with no waiting: 1.000 = no rank ever waits), the mean of the per-update max/mean, and
the worst update's.

Rows:

* ``default``: ``like_fixed(lengths, B, num_replicas=R)``, its micro-batches as planned;
* ``packed``: the same with ``pack_len``, its rows as dealt (dense rows, the default layout,
  dealt by rows);
* ``packed, varlen``: the same with ``attention="varlen"``, the padding-free kernel this work
  is of: each update's samples dealt to the ranks by their work, then packed;
* ``random, best deal``: the fixed batch's random updates of ``B·R`` samples, each dealt to
  the ranks largest first to the least loaded (no equal counts): what any deal of random
  updates can reach;
* ``length strata``: a rank-symmetric stratified draw, computed here for comparison, not
  planned by the library: the samples sorted by length (ties at random) and cut into 4 strata
  (``like_fixed``'s micro-batches an update); each update takes from every stratum a run of
  ``B / 4`` neighbours a rank, dealt so that each rank's share of the run has near-equal
  lengths to every other's: exactly ``B`` samples a rank, each run padding-free.

Corpora: log-normal lengths (median about 245, σ 0.8, seed 0, cut at ``pack_len``) and the
shared ChnSentiCorp reviews (cut at 512). It asserts nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import chnsenticorp_lengths, print_table

from dynbatch import like_fixed, plan_epoch

HIDDEN = 512
STRATA = 4  # like_fixed's micro-batches an update, at the least


def work(lengths: np.ndarray) -> np.ndarray:
    lens = lengths.astype(np.float64)
    return lens**2 + HIDDEN * lens


def summary(loads: list[np.ndarray]) -> tuple[str, str, str]:
    """``Σ max / Σ mean``, mean max/mean, worst max/mean over updates of per-rank loads."""
    top = np.array([ld.max() for ld in loads])
    mean = np.array([ld.mean() for ld in loads])
    ratio = top / mean
    return f"{top.sum() / mean.sum():.3f}", f"{ratio.mean():.3f}", f"{ratio.max():.2f}"


def planned_loads(lengths: np.ndarray, options, replicas: int) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """Per update, each rank's work, from the epoch-0 plan the sampler yields."""
    sp = plan_epoch(lengths, options, 0, replicas)
    plan, padding = sp.plan, sp.is_padding
    per_batch = np.array(
        [0.0 if pad else work(lengths[b]).sum() for b, pad in zip(plan, padding, strict=True)]
    ).reshape(-1, replicas)  # steps x ranks
    ends = sp.window_ends if sp.window_ends is not None else np.arange(1, sp.num_steps + 1)
    starts = np.r_[0, ends[:-1]]
    return [per_batch[a:b].sum(axis=0) for a, b in zip(starts, ends, strict=True)]


def random_best_deal(lengths: np.ndarray, size: int, replicas: int) -> list[np.ndarray]:
    order = np.random.default_rng(0).permutation(lengths.size)
    loads = []
    for start in range(0, order.size - size + 1, size):  # full updates
        rank = np.zeros(replicas)
        for w in np.sort(work(lengths[order[start : start + size]]))[::-1]:
            rank[np.argmin(rank)] += w
        loads.append(rank)
    return loads


def length_strata(lengths: np.ndarray, batch: int, replicas: int) -> list[np.ndarray]:
    """Each update ``B`` samples a rank: from each of ``STRATA`` length strata a run of about
    ``B / STRATA`` neighbours a rank, the run's ``R`` groups of neighbours dealt one to each
    rank (a group's longest to the rank that got the shortest of the group before)."""
    rng = np.random.default_rng(0)
    order = np.lexsort((rng.random(lengths.size), lengths))
    size = batch * replicas
    n = lengths.size // size  # full updates only
    runs = np.full(STRATA, batch // STRATA) + (np.arange(STRATA) < batch % STRATA)
    bounds = np.r_[0, np.cumsum(runs * replicas * n)]
    loads = np.zeros((n, replicas))
    for h in range(STRATA):
        stratum = order[bounds[h] : bounds[h + 1]].reshape(n, runs[h], replicas)
        groups = stratum[rng.permutation(n)]  # update k: one run of the stratum
        groups[:, 1::2] = groups[:, 1::2, ::-1]  # snake: every other group dealt backwards
        loads += work(lengths[groups]).sum(axis=1)
    return list(loads)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pack-len", type=int, default=2048)
    parser.add_argument("--ranks", default="8,64")
    args = parser.parse_args()
    batch, pack_len = args.batch_size, args.pack_len
    rng = np.random.default_rng(0)
    corpora = {
        "log-normal": np.clip(rng.lognormal(5.5, 0.8, 20_000).astype(np.int64), 2, pack_len),
        "reviews": chnsenticorp_lengths(),
    }
    rows = []
    for name, lens in corpora.items():
        for replicas in (int(r) for r in args.ranks.split(",")):
            size = batch * replicas
            default = like_fixed(lens, batch, num_replicas=replicas)
            packed = like_fixed(lens, batch, num_replicas=replicas, pack_len=pack_len)
            varlen = like_fixed(
                lens, batch, num_replicas=replicas, pack_len=pack_len, attention="varlen"
            )
            for how, loads in (
                ("default", planned_loads(lens, default, replicas)),
                ("packed", planned_loads(lens, packed, replicas)),
                ("packed, varlen", planned_loads(lens, varlen, replicas)),
                ("random, best deal", random_best_deal(lens, size, replicas)),
                ("length strata", length_strata(lens, batch, replicas)),
            ):
                rows.append([name, replicas, how, len(loads), *summary(loads)])
    print(
        f"B = {batch} a rank, rows of {pack_len}; work per rank ΣL² + {HIDDEN}·ΣL; "
        "max/mean over ranks per update\n"
    )
    print_table(
        ["corpus", "ranks", "draw", "updates", "Σmax/Σmean", "mean", "worst"],
        rows,
    )


if __name__ == "__main__":
    main()
