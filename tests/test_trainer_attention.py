"""The Trainer prices packed rows by the attention its model runs (NOTE [ attention layouts ]):
read from the model's config (paddlenlp's decoders: the dense mask), or the layout the user
passes, refused by name where the model cannot take it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("paddlenlp")

from dynbatch import InputError
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer
from dynbatch.plan.packs import Attention, PackLayout

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from lm_toy import Pairs, tiny_lm
from lm_toy import collate as lm_collate
from trainer_toy import make_args


def trainer(tmp_path: Path, **kw: object) -> DynamicBatchTrainer:
    ds = Pairs(48, seed=3)
    return DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, per_device_train_batch_size=4, max_steps=1),
        train_dataset=ds,
        data_collator=lm_collate,
        lengths=ds.lengths,
        time_model=None,
        **kw,
    )


def test_a_paddlenlp_decoder_plans_dense_rows_that_stop_short_of_a_long_pack_len(
    tmp_path: Path,
) -> None:
    t = trainer(tmp_path, pack_len=160)
    longest = int(Pairs(48, seed=3).lengths.max())
    assert t.packed is not None and t.packed.attention == "dense"
    assert PackLayout.from_options(t.options).attention == Attention("dense")
    assert longest <= t.options.pack_len < 160, "dense rows stop where attention outgrows"
    assert t.options.pack_len**2 <= 4 * longest**2


def test_a_layout_the_model_cannot_take_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"attention='varlen'.*takes packed rows' mask as"):
        trainer(tmp_path, pack_len=96, attention="varlen")
    with pytest.raises(InputError, match="attention='flashmask' is how packed rows run"):
        trainer(tmp_path, attention="flashmask")
