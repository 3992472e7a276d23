"""The end of ``dynbatch stats --help``: what each row and column of its table means, and how
to pick ``--max-cost``. A test checks that every column ``stats`` prints is explained here."""

from __future__ import annotations

__all__ = ["EPILOG"]

EPILOG = """\
rows (one per plan of one epoch, one rank):
  bucket        the sampler's default order: near-equal lengths in a batch, batches shuffled
  shuffle       batches filled in a random order of samples (lengths mixed)
  ascending     shortest samples first (the same plan every epoch)
  descending    longest samples first (the same plan every epoch)
  none          the file's order
  fixed         the baseline: a shuffled fixed batch of --fixed-batch-size, whatever it costs
  like fixed    like_fixed(): the fixed batch's updates without its padding, within
                --max-cost; with a step time (--time-model, --time-table or a --cost-file's),
                the split the step time predicts faster
  grouped       with --group-by-length: like_fixed(group_by_length=True), updates of
                near-equal lengths as Hugging Face's group_by_length draws them
  split         with --update-size and a step time: what the sampler given it as time_model
                plans, the updates split at the step time (grouped with --group-by-length)
  stream N      with --buffer-size N: the corpus read as a stream (DynamicBatchIterable),
                in file order, planned N samples at a time; with --update-size and a step
                time, split at the step time as the split row is
  packed        with --pack-len N: the epoch DynamicBatchSampler(batch_size=
                --fixed-batch-size, pack_len=N) runs: samples packed into rows of N
                tokens (plan_packs), micro-batches of the most rows --max-cost allows;
                with a step time each update run packed, split or whole, whichever it
                predicts fastest, or the fixed batch's own updates where that epoch is
                faster. Batches are its micro-batches, bs their samples, each laid out as
                the collator builds it (PackCollator.for_sampler): R rows of N (or its
                longest sample), or padded, a sample a row; pad eff is real tokens / the
                tokens those steps compute, cost cost(R or n, width); updates hold
                --fixed-batch-size samples on average, the fixed batch's count (with
                --update-unit tokens, as many tokens as those samples hold on average,
                cut at no step time: the step time only prices them). Rows are padded to
                --pad-to-multiple-of; --batch-size-multiple and --group-by-length are
                refused with it, as the sampler refuses them

columns:
  order         the plan the row describes (see rows)
  batches       micro-batches (forward and backward passes) in the epoch
  updates       optimizer updates in the epoch: --update-size's groups, else one per batch
  pad eff       padding efficiency: real tokens / padded tokens (1 = no padding); of
                (source, target) pairs, both sides' tokens
  src eff       of pairs (two --column or --field, or an [N, 2] .npy): the sources' real
                tokens / their padded tokens, each batch padded to its longest source
  tgt eff       of pairs: the same of the targets
  bs min        the fewest samples in a batch
  bs med        the median samples in a batch
  bs max        the most samples in a batch
  cost max      the largest batch cost, cost(n, L) with L the batch's padded length (of
                pairs cost(n, Ls, Lt), the cost's two-length form, printed above): at most
                --max-cost in every row but fixed (the memory high-water mark), but for a
                sample over it even alone under --oversize alone
  cost mean     the mean batch cost
  cost cv       the batch cost's coefficient of variation (std / mean): how much memory
                swings from step to step (0 = every batch costs the same)
  util          utilisation: the mean of batch cost / --max-cost (1 = every batch fills the
                budget)
  epoch s       with a step time: the epoch's predicted seconds, the sum of every batch's
                predicted step time
  vs fixed      the fixed row's epoch s / this row's. A row that makes the fixed batch's
                updates (like fixed, packed, any row with the fixed row's updates) runs the
                same training: above 1.00x is faster. Marked * where a row makes other
                updates (bucket: fewer, larger ones): the same samples in another training,
                so the ratio compares epoch times only, not the same training run faster;
                a legend under the table lists those rows with their updates

picking --max-cost:
  Start from the batch you use today. A fixed batch of B samples at max length L costs
  B·L² under --cost quadratic (the default) and B·L under --cost linear: pass that, e.g.
  B=32 at L=512 is --max-cost 8388608 (quadratic) or 16384 (linear), and every batch costs
  at most what your worst fixed batch did. --batch-size B without --max-cost does this for
  you, as DynamicBatchSampler(batch_size=B) plans (like_fixed): the budget is the fixed
  batch's worst, cost(B, L_max), L_max the corpus's longest, and the first line says so.
  Raise it while the device's memory allows; with a --cost-file from dynbatch.calibrate,
  --max-cost is the memory target in MiB.
"""
