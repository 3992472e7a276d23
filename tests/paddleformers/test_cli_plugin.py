"""``paddleformers-cli train`` with dynbatch's plug-in, the real CLI on this CPU: one YAML line
trains on dynbatch's batches, the settings come from ``$DYNBATCH_CONFIG``, and what cannot be
honoured is refused by name at start (NOTE [ paddleformers-cli on a CPU ] in ``pf_cli.py``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("paddleformers.cli.train.sft.workflow")

import pf_cli  # tests/paddleformers, after the skip

N_TRAIN, BATCH = 64, 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory: Any) -> Path:
    return pf_cli.make_folder(tmp_path_factory.mktemp("cli"), n_train=N_TRAIN)


def test_one_yaml_line_trains_the_fixed_batchs_updates_each_example_once(folder: Path) -> None:
    code, log = pf_cli.train(folder, pf_cli.config(out="plain"), "plain")
    assert code == 0, log[-3000:]
    # the iterable dataset drops invalid examples unseen: no count is claimed for them
    assert f"dynbatch: {N_TRAIN} valid examples of IteratorSFTDataset (invalid ones " in log
    assert "0 skipped" not in log
    steps = math.ceil(N_TRAIN / BATCH)  # the default recipe told the workflow's batch
    assert f"dynbatch: max_steps={steps}, decay_steps={steps}" in log, "the schedule is the plan's"
    assert pf_cli.logged(log, "global_step")[-1] == steps, "the update count is the plan's"
    assert sum(pf_cli.logged(log, "samples_per_step")) == N_TRAIN, "each example once, none twice"
    assert pf_cli.logged(log, "tokens_per_sec") and pf_cli.logged(log, "padding_efficiency")
    assert "per-token mean over its loss tokens" in log
    assert pf_cli.logged(log, "eval_loss"), "the workflow's own evaluation runs"


def test_packing_key_means_dynbatchs_rows_at_the_fixed_batchs_updates(folder: Path) -> None:
    cfg = pf_cli.config(out="packed", packing=True, dataset_type="map")
    code, log = pf_cli.train(folder, cfg, "packed")
    assert code == 0, log[-3000:]
    assert f"dynbatch: {N_TRAIN} valid examples of MapSFTDataset" in log
    steps = math.ceil(N_TRAIN / BATCH)  # PaddleFormers' own packing would take fewer, fuller
    assert f"max_steps={steps}" in log and "means dynbatch's rows" in log
    assert pf_cli.logged(log, "global_step")[-1] == steps
    assert sum(pf_cli.logged(log, "samples_per_step")) == N_TRAIN


def test_max_steps_in_the_yaml_is_honoured_and_an_epoch_evaluation_stays_an_epoch(
    folder: Path,
) -> None:
    """``max_steps`` past the first of two epochs: the run stops there, and
    ``evaluation_strategy: epoch`` evaluates at the plan's epoch, not at ``max_steps``."""
    cfg = pf_cli.config(out="steps", num_train_epochs=2, max_steps=11)
    code, log = pf_cli.train(folder, cfg, "steps")
    assert code == 0, log[-3000:]
    per_epoch = math.ceil(N_TRAIN / BATCH)
    assert f"max_steps=11, decay_steps=11, eval_steps={per_epoch} (an epoch)" in log
    assert pf_cli.logged(log, "global_step")[-1] == 11, "the YAML's max_steps, honoured"
    assert sum(pf_cli.logged(log, "samples_per_step")) == 11 * BATCH


def test_a_bad_setting_is_refused_by_name_before_the_model_loads(folder: Path) -> None:
    settings = folder / "bad.json"
    settings.write_text(json.dumps({"max_cots": 3}))
    code, log = pf_cli.train(folder, pf_cli.config(out="bad"), "bad", settings=settings)
    assert code != 0
    assert "unknown setting(s) max_cots" in log and "max_cost" in log
    assert "Loading model weights" not in log


def test_padding_free_means_dynbatchs_rows_of_the_fixed_batchs_tokens(folder: Path) -> None:
    """PaddleFormers' ``padding_free`` lays out a batch as one row; the plug-in packs the fixed
    batch's updates into rows of that batch's tokens, priced as the model's attention runs."""
    code, log = pf_cli.train(folder, pf_cli.config(out="pf", padding_free=True), "free")
    assert code == 0, log[-3000:]
    steps = math.ceil(N_TRAIN / BATCH)
    assert f"max_steps={steps}" in log and "padding_free (rows of up to" in log
    assert "means dynbatch's rows" in log
    assert pf_cli.logged(log, "global_step")[-1] == steps, "the fixed batch's updates"
    assert sum(pf_cli.logged(log, "samples_per_step")) == N_TRAIN, "each example once"


def test_the_dpo_workflow_is_refused_by_name(folder: Path) -> None:
    code, log = pf_cli.train(folder, pf_cli.config(out="dpo", stage="DPO"), "dpo")
    assert code != 0
    assert "stage='DPO' is not honoured" in log


def test_a_yaml_paddleformers_refuses_is_refused_with_the_plugin_loaded(folder: Path) -> None:
    """A key of dynbatch's in the YAML: PaddleFormers refuses unknown keys, hence the file."""
    code, log = pf_cli.train(folder, pf_cli.config(out="key", pack_len=65), "key")
    assert code != 0
    assert "not used by the PdArgumentParser" in log and "pack_len" in log


def test_settings_file_sets_the_plan_and_two_cpu_ranks_share_it(folder: Path) -> None:
    settings = folder / "settings.yaml"
    settings.write_text("pack_len: 65\nmax_batch_size: 8\n")
    cfg = pf_cli.config(out="ranks", per_device_train_batch_size=4)
    code, log = pf_cli.train(folder, cfg, "ranks", ranks=2, settings=settings)
    assert code == 0, log[-3000:]
    steps = math.ceil(N_TRAIN / BATCH)  # 4 a rank, 2 ranks
    assert f"max_steps={steps}" in log
    assert pf_cli.logged(log, "global_step")[-1] == steps
    assert sum(pf_cli.logged(log, "samples_per_step")) == N_TRAIN, "the global plan, shared"


def test_a_run_killed_after_a_checkpoint_resumes_from_the_workflows_own(folder: Path) -> None:
    steps = math.ceil(N_TRAIN / BATCH)
    full_code, full = pf_cli.train(folder, pf_cli.config(out="whole", save_steps=3), "whole")
    assert full_code == 0, full[-3000:]
    cfg = pf_cli.config(out="killed", save_steps=3, overwrite_output_dir=False)
    process, _ = pf_cli.start(folder, cfg, "killed")
    pf_cli.wait_for(folder / "killed" / "checkpoint-3" / "trainer_state.bin", process)
    pf_cli.kill(process)
    code, log = pf_cli.train(folder, cfg, "killed")  # the workflow finds its last checkpoint
    assert code == 0, log[-3000:]
    assert re.search(r"resuming training at \S*checkpoint-\d", log)
    assert pf_cli.logged(log, "global_step")[-1] == steps
    resumed = pf_cli.logged(log, "loss")[-1]
    assert resumed == pytest.approx(pf_cli.logged(full, "loss")[-1], rel=1e-4), (
        "the resumed run trains the uninterrupted run's batches"
    )
