"""Peak memory of packed micro-batches against the fixed batch's worst, per pack_len and layout.

    python benchmarks/pack_memory.py [--pack-lens 1024,2048,4096,8192] [--batch-size 8]

Lengths cut at 512, the fixed batch ``B`` (default 8): its worst batch is ``B`` samples of the
longest length, padded. For each row length ``P`` and attention layout, the options are
``like_fixed(lengths, B, pack_len=P, attention=...)`` (the default budget) and the micro-batch
is the widest they deal: ``max_rows`` rows, each full to the options' ``pack_len`` (for dense,
rows stop short of ``P`` where their attention would outgrow the fixed batch's:
NOTE [ the default budget of packed rows ]). ``dense`` is measured: paddle's host allocator at
its peak over one forward and backward of a tiny paddlenlp Qwen2 (hidden 64, 2 layers, 4 heads),
rows fed with the dense block mask, over the same for the fixed batch's worst. ``before`` is
the same measurement of the widest micro-batch the linear price allowed before (``B·512 / P``
rows of ``P``). ``flashmask`` and ``varlen`` need a GPU: they are priced, not measured, as
the larger of the micro-batch's tokens over the fixed worst's and its samples' attention
``ΣL_i²`` over ``B·512²`` (NOTE [ attention layouts ]). Corpora: log-normal lengths (median
about 245, seed 0) and the shared ChnSentiCorp reviews; the table's micro-batch is the widest
the plan may deal, which no corpus exceeds. It asserts nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from _common import chnsenticorp_lengths, print_table

from dynbatch import InputError, PackCollator, like_fixed
from dynbatch.memory import peak_memory_mib, reset_peak_memory
from dynbatch.plan.packs import PackLayout, plan_packed_epoch

VOCAB = 1000
CUT = 512


def tiny_qwen2() -> Any:
    import paddle
    from paddlenlp import transformers

    paddle.seed(0)
    config = transformers.Qwen2Config(
        vocab_size=VOCAB,
        max_position_embeddings=16384,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=192,
        use_cache=False,
        tie_word_embeddings=False,
    )
    return transformers.Qwen2ForCausalLM(config)


def peak(model: Any, inputs: dict[str, Any]) -> float:
    import paddle

    tensors = {k: paddle.to_tensor(v) for k, v in inputs.items()}
    reset_peak_memory()
    out = model(**tensors, return_dict=True)
    out.logits.mean().backward()
    mib = peak_memory_mib()
    model.clear_gradients()
    return mib


def packed_peak(model: Any, rows: int, width: int, longest: int, rng: Any) -> float:
    """Peak of ``rows`` rows, each a longest sample and the rest of ``width`` in another."""
    row = [rng.integers(1, VOCAB, min(longest, width))]
    if width > longest:
        row.append(rng.integers(1, VOCAB, width - longest))
    batch = PackCollator(width, attention="dense")(row * rows)
    return peak(model, {k: batch[k] for k in ("input_ids", "position_ids", "attention_mask")})


def priced(lens: np.ndarray, options: Any, attention: str, batch: int) -> float:
    """The heaviest micro-batch of epoch 0, priced as ``attention`` runs it, over the fixed
    batch's worst: the larger of its tokens' and its attention's share."""
    plan = plan_packed_epoch(lens, options, 0).plan
    seq = lens[plan.indices]
    rows, width = PackLayout.from_options(options).shapes(seq, plan.offsets)
    tokens = np.add.reduceat(seq, plan.offsets[:-1])
    squares = np.add.reduceat(seq.astype(np.float64) ** 2, plan.offsets[:-1])
    longest = int(lens.max())
    base = rows * width if attention == "flashmask" else tokens
    return float(max((base / (batch * longest)).max(), (squares / (batch * longest**2)).max()))


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack-lens", default="1024,2048,4096,8192")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    batch = args.batch_size
    rng = np.random.default_rng(0)
    corpora = {
        "log-normal": np.clip(rng.lognormal(5.5, 0.8, 20_000).astype(np.int64), 2, CUT),
        "reviews": chnsenticorp_lengths(),
    }
    model = tiny_qwen2()
    fixed = peak(
        model,
        {
            "input_ids": rng.integers(1, VOCAB, (batch, CUT)),
            "attention_mask": np.ones((batch, CUT), np.int64),
        },
    )
    print(f"fixed batch's worst ({batch}, {CUT}): {fixed:.1f} MiB (host allocator peak)\n")
    rows_out = []
    for name, lens in corpora.items():
        longest = int(lens.max())
        for pack_len in (int(p) for p in args.pack_lens.split(",")):
            cells: list[str] = [name, f"{pack_len:,}"]
            if pack_len <= batch * longest:
                before = packed_peak(model, batch * longest // pack_len, pack_len, longest, rng)
                cells.append(f"({batch * longest // pack_len}, {pack_len}) {before / fixed:.2f}x")
            else:
                cells.append("refused")
            for attention in ("dense", "flashmask", "varlen"):
                try:
                    options = like_fixed(lens, batch, pack_len=pack_len, attention=attention)
                except InputError:
                    cells.append("refused by name")
                    continue
                shape = f"({options.max_rows}, {options.pack_len})"
                if attention == "dense":
                    mib = packed_peak(model, options.max_rows, options.pack_len, longest, rng)
                    cells.append(f"{shape} {mib / fixed:.2f}x")
                else:
                    cells.append(f"{shape} {priced(lens, options, attention, batch):.2f}x priced")
            rows_out.append(cells)
    head = ["corpus", "pack_len", "before (linear)", "dense, measured", "flashmask", "varlen"]
    print_table(head, rows_out)


if __name__ == "__main__":
    main()
