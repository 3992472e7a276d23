"""VisualDLHook: real training runs write real VisualDL files, read back with LogReader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

import dynbatch

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from toy import Bag, Toy, per_sample_loss

visualdl = pytest.importorskip("visualdl")
TAGS = [
    "batch_size",
    "max_len",
    "real_tokens",
    "padded_tokens",
    "padding_efficiency",
    "cost_ratio",
    "loss",
    "lr",
    "samples_per_sec",
    "tokens_per_sec",
    "memory_mib",
]


def read(logdir: Path) -> dict[str, list[float]]:
    (path,) = logdir.glob("vdlrecords.*")
    reader = visualdl.LogReader(file_path=str(path))
    return {
        tag: [r.value for r in reader.get_data("scalar", tag)]
        for tag in reader.get_tags()["scalar"]
    }


def make(n: int = 200) -> tuple[Toy, dynbatch.DynamicBatchSampler, paddle.io.DataLoader]:
    ds = Toy(n, seed=2)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=4 * 160**2)
    loader = paddle.io.DataLoader(
        ds,
        batch_sampler=sampler,
        num_workers=2,
        collate_fn=dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack()),
    )
    return ds, sampler, loader


def test_hand_written_loop_logs_every_tag_once_per_step(tmp_path: Path) -> None:
    ds, sampler, loader = make()
    model = Bag()
    opt = paddle.optimizer.Adam(1e-3, parameters=model.parameters())
    with dynbatch.VisualDLHook(str(tmp_path), sampler, optimizer=opt, progress=True) as hook:
        hook.on_epoch_begin(0)
        for step, (ids, index) in enumerate(loader):
            loss = per_sample_loss(model, ids, index).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            hook.on_train_batch_end(step, {"loss": loss})
        hook.on_epoch_end(0)
    logged = read(tmp_path)
    plan = sampler.batches(0)
    for tag in TAGS:
        assert len(logged[f"train/{tag}"]) == len(plan), f"train/{tag}: one value per step"
    assert logged["train/batch_size"] == [float(b.size) for b in plan], (
        "the planned batch of each step"
    )
    assert logged["train/max_len"] == [float(ds.lengths[b].max()) for b in plan]
    assert all(0 < v <= 1 for v in logged["train/cost_ratio"]), "within budget"
    assert all(v > 0 for v in logged["train/memory_mib"])
    assert logged["train/lr"][0] == pytest.approx(1e-3)


def test_model_fit_calls_set_epoch_and_logs_both_epochs(tmp_path: Path) -> None:
    _, sampler, loader = make(150)
    net = Bag()
    model = paddle.Model(net)
    model.prepare(
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        lambda logits, index: paddle.nn.functional.cross_entropy(logits, index % 2),
    )
    model.fit(
        loader, epochs=2, verbose=0, callbacks=[dynbatch.VisualDLHook(str(tmp_path), sampler)]
    )
    assert sampler.epoch == 1, "set_epoch was called by the hook"
    sizes = read(tmp_path)["train/batch_size"]
    e0, e1 = sampler.batches(0), sampler.batches(1)
    assert sizes == [float(b.size) for b in [*e0, *e1]], "each epoch logged as planned"
    assert [b.tolist() for b in e0] != [b.tolist() for b in e1], "the epochs' batches differ"


def test_without_visualdl_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['visualdl'] = None\n"
        "import dynbatch\n"
        "try:\n    dynbatch.VisualDLHook('/tmp/x')\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install visualdl" in out.stdout and "dynbatch[" not in out.stdout


def test_numpy_and_tensor_losses_become_floats(tmp_path: Path) -> None:
    with dynbatch.VisualDLHook(str(tmp_path)) as hook:
        hook.on_train_batch_end(0, {"loss": np.array([0.5], dtype="float32"), "lr": 0.1})
        hook.on_train_batch_end(1, {"loss": paddle.to_tensor([0.25]), "lr": [0.1]})
    assert read(tmp_path)["train/loss"] == [0.5, 0.25]


def test_one_progress_bar_tqdm_by_hand_none_of_ours_under_a_verbose_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, sampler, loader = make(150)
    with dynbatch.VisualDLHook(str(tmp_path / "loop"), sampler, progress=True) as hook:
        hook.on_epoch_begin(0)
        for step in range(len(sampler)):
            hook.on_train_batch_end(step, {"loss": 0.5})
        hook.on_epoch_end(0)
    drawn = capsys.readouterr().err
    total = len(sampler.batches(0))
    assert "epoch 0: 100%" in drawn and f"{total}/{total}" in drawn, "a tqdm bar by hand"

    net = Bag()
    model = paddle.Model(net)
    model.prepare(
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        lambda logits, index: paddle.nn.functional.cross_entropy(logits, index % 2),
    )
    hook = dynbatch.VisualDLHook(str(tmp_path / "fit"), sampler, progress=True)
    model.fit(loader, epochs=1, verbose=1, callbacks=[hook])
    shown = capsys.readouterr()
    assert "step" in shown.out, "hapi's ProgBarLogger draws its bar"
    assert "epoch 0:" not in shown.err + shown.out, "and the hook draws none next to it"
