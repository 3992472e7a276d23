"""``$DYNBATCH_CONFIG``, the plug-in's settings file, read as the plug-in reads it at the CLI's
start (before the model loads: ``test_cli_plugin.py`` runs the CLI on a bad one): every bad file
or value refused by the variable, the file, the setting and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("paddleformers.cli.train.sft.workflow")

from dynbatch.errors import InputError
from dynbatch.integrations.paddleformers.sft_workflow import ENV, read_settings


def _read(tmp_path: Path, name: str, text: str) -> dict[str, object]:
    path = tmp_path / name
    path.write_text(text)
    return read_settings({ENV: str(path)})


def test_an_empty_settings_file_is_the_default_recipe(tmp_path: Path) -> None:
    assert _read(tmp_path, "s.yaml", "") == {}


@pytest.mark.parametrize(("name", "text"), [("s.yaml", "pack_len: [1,\n  : :"), ("s.json", "{bad")])
def test_a_settings_file_that_does_not_parse_is_refused_by_its_name(
    tmp_path: Path, name: str, text: str
) -> None:
    with pytest.raises(InputError, match=rf"{ENV}=.*{name}.* does not parse as (YAML|JSON)"):
        _read(tmp_path, name, text)


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("pack_len: abc", "pack_len must be an integer >= 1"),
        ("pack_len: -1", "pack_len must be an integer >= 1"),
        ("pack_len: true", "pack_len must be an integer >= 1"),
        ("order: nonsense", "order must be one of"),
        ("max_batch_size: 0", "max_batch_size must be an integer >= 1"),
        ("accumulate: rows", "accumulate must be one of"),
        ("accumulate_target: -2", "accumulate_target must be"),
    ],
)
def test_a_settings_value_of_the_wrong_kind_is_refused_on_reading(
    tmp_path: Path, text: str, valid: str
) -> None:
    with pytest.raises(InputError, match=rf"{ENV}=.*s\.yaml.*{valid}"):
        _read(tmp_path, "s.yaml", text + "\n")


def test_good_settings_are_read_as_given(tmp_path: Path) -> None:
    assert _read(tmp_path, "s.yaml", "pack_len: 65\nmax_batch_size: 8\n") == {
        "pack_len": 65,
        "max_batch_size": 8,
    }


@pytest.mark.parametrize("more", ["", "max_cost: 4000\nupdate_size: 8\n"])
def test_an_accumulate_target_the_plans_own_updates_would_cut_is_refused_on_reading(
    tmp_path: Path, more: str
) -> None:
    """The default recipe (no max_cost) and update_size make the updates themselves."""
    with pytest.raises(InputError, match=rf"{ENV}=.*accumulate_target=100 would cut them"):
        _read(tmp_path, "s.yaml", f"accumulate_target: 100\n{more}")


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("time_model: fast", r"time_model='fast'.*or time_model='auto'"),
        ("time_model: 1,2,3\nmax_cost: 4000", r"time_model='1,2,3'.*max_cost replaces"),
        ("time_model: 1,2,3\naccumulate: tokens", r"accumulate='tokens'"),
    ],
)
def test_a_time_model_the_trainer_would_refuse_is_refused_on_reading(
    tmp_path: Path, text: str, valid: str
) -> None:
    with pytest.raises(InputError, match=rf"{ENV}=.*{valid}"):
        _read(tmp_path, "s.yaml", text + "\n")


def test_a_time_model_of_the_recipe_is_read_as_given(tmp_path: Path) -> None:
    assert _read(tmp_path, "s.yaml", "time_model: 1,2,3\n") == {"time_model": "1,2,3"}
