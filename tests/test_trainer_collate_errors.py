"""A collate error stops DynamicBatchTrainer's training by name, never a hang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("paddlenlp")


sys.path.insert(0, str(Path(__file__).parent / "scripts"))

SCRIPTS = Path(__file__).parent / "scripts"


TRAINER_COLLATE_FAILS = """
import sys
sys.path.insert(0, {scripts!r})
import paddle
from trainer_toy import PLAN, Reviews, make_args, tiny_bert
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer


class Texts(Reviews):
    # a field the packed rows would drop, in the samples a DataLoader worker reads only: the
    # checks made when the Trainer is made read samples in this process, so the loader's
    # packed collator is the first to meet it
    def __getitem__(self, i):
        sample = super().__getitem__(i)
        if paddle.io.get_worker_info() is None:
            return sample
        return {{**sample, "text": "a review"}}


def broken(samples):
    raise LookupError("no vocabulary entry 'x'")


packed = {packed}
ds = Texts(40) if packed else Reviews(40)
plan = {{"pack_len": 40, "max_batch_size": 1, "time_model": None}} if packed else PLAN
trainer = DynamicBatchTrainer(
    model=tiny_bert(0),
    args=make_args({out!r}, dataloader_num_workers={workers}, max_steps=2),
    train_dataset=ds,
    data_collator=broken,
    lengths=ds.lengths,
    **plan,
)
try:
    trainer.train()
except Exception as exc:
    print("RAISED", type(exc).__name__, "|", str(exc).splitlines()[0])
    print("CAUSE", type(exc.__cause__).__name__, "|", str(exc.__cause__).splitlines()[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize(("packed", "workers"), [(False, 0), (True, 2)], ids=["0", "packed-2"])
def test_a_collate_error_stops_the_trainer_by_name(
    tmp_path: Path, packed: bool, workers: int
) -> None:
    """The train loader the Trainer builds raises its collator's error, named, where paddle's
    own hangs (num_workers=0) or raises a bare SystemError (workers); one mechanism for the
    user's data_collator and the packed rows (dynbatch.safe_collate)."""
    from deadline import run_within

    scripts = str(Path(__file__).parent / "scripts")
    code = TRAINER_COLLATE_FAILS.format(
        scripts=scripts, packed=packed, out=str(tmp_path), workers=workers
    )
    done = run_within(300, code)
    out = done.stdout
    if packed:
        assert "RAISED InputError | samples[0] has the field 'text', which the packed" in out, (
            out + done.stderr[-3000:]
        )
        where = "dynbatch.integrations.core.packing.pack_collator.<locals>.rows_of"
    else:
        assert "RAISED LookupError | no vocabulary entry 'x'" in out, out + done.stderr[-3000:]
        where = "__main__.broken"
    assert f"CAUSE CollateError | the collate_fn {where} (on " in out, out
