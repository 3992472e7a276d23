"""Each adapter's host: the framework's names the core and the host touch still exist.

The core (``dynbatch.integrations.core``) reaches a framework only through an adapter's
``Host`` (NOTE [ one core, one host per adapter ] in ``src/dynbatch/integrations/core/host.py``),
so one check serves every adapter: each one's installed framework still has every private name
the core borrows from its classes (``_compat.touched(host)``) and every one the host reads of its
model classes (``host.touched_models``); an upgrade that drops one fails here, loudly, instead
of silently skipping a hook. An adapter whose framework is not installed is skipped: paddlenlp
and PaddleFormers cannot share an environment, so ``tests/paddleformers`` (run in its own) calls
:func:`check_touched_names` and :func:`check_private_names` for PaddleFormers' adapter.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("paddle")
import paddle

import dynbatch.integrations
from dynbatch import InputError, InputTypeError, PlanOptions
from dynbatch.integrations.core import CausalPacking, Host, _compat
from dynbatch.integrations.core.host import MASK_FIELDS
from dynbatch.integrations.core.packing import CAUSAL_LM, Packed, pack_collator, packed_model

#: every adapter package of ``dynbatch.integrations``, and the release its host was written for
ADAPTERS = {"paddlenlp": "3.0.0b4", "paddleformers": "1.2.0"}
CORE = Path(_compat.__file__).parent
#: rows of 8 tokens, packed
PACKS = PlanOptions(max_cost=64, cost="linear", pack_len=8, update_size=4, order="shuffle")


def test_every_adapter_is_checked() -> None:
    found = {
        module.name
        for module in pkgutil.iter_modules(dynbatch.integrations.__path__)
        if module.ispkg and module.name != "core"
    }
    assert found == set(ADAPTERS), "list each adapter package in ADAPTERS"


def host_of(adapter: str) -> Host:
    try:
        module = importlib.import_module(f"dynbatch.integrations.{adapter}")
    except ImportError as exc:
        pytest.skip(f"{adapter} is not installed: {exc}")
    host = module.DynamicBatchTrainer.host
    assert isinstance(host, Host), f"{adapter}'s DynamicBatchTrainer names its Host"
    return host


def _has(cls: type, name: str) -> bool:
    """``cls`` has ``name``: as its own attribute, or set on ``self`` by its ``__init__``."""
    return hasattr(cls, name) or f"self.{name}" in inspect.getsource(cls.__init__)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_every_private_name_touched_still_exists(adapter: str) -> None:
    check_touched_names(adapter)


def check_touched_names(adapter: str) -> None:
    """The host's classes (and paddle's) have every name ``_compat`` uses; its model classes
    every name the host reads; its ``TrainingArguments`` every parallel degree the host names,
    and none of the other framework's names it refuses."""
    host = host_of(adapter)
    assert (host.name, host.written_for) == (adapter, ADAPTERS[adapter])
    handler = host.callback_handler
    # VisualDLCallback's attributes are checked on its __init__ source (it needs visualdl)
    instances: dict[type, Any] = {handler: handler([], None, None, None, None)}
    for cls, names in _compat.touched(host).items():
        for name in names:
            owner = instances.get(cls, cls)
            found = hasattr(owner, name) or f"self.{name}" in inspect.getsource(cls.__init__)
            assert found, f"{adapter}'s {cls.__name__} has no {name} any more: update _compat"
    for path, names in host.touched_models.items():
        module, _, name = path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        for touched in names:
            assert _has(cls, touched), f"{path} has no {touched}: see its host"
    fields = set(host.training_arguments.__dataclass_fields__)
    for degree in host.parallel_degrees:
        assert degree in fields, f"{adapter}'s TrainingArguments has no {degree}: see its host"
    for foreign in host.foreign_arguments:
        assert foreign not in fields, f"{adapter}'s TrainingArguments has {foreign}: see its host"


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_private_names_only_in_compat_and_the_host(adapter: str) -> None:
    check_private_names(adapter)


def check_private_names(adapter: str) -> None:
    """The rest of the core and of the adapter reads as plain subclassing: the Trainer's private
    names are written only in the core's ``_compat``, the models' only there and in the module
    that builds the host."""
    host = host_of(adapter)
    package = Path(importlib.import_module(f"dynbatch.integrations.{adapter}").__file__ or "")
    builds = Path(inspect.getfile(host.causal_packing.accepts))
    files = sorted([*CORE.glob("*.py"), *package.parent.glob("*.py")])
    source = {path: path.read_text(encoding="utf-8") for path in files}
    assert any("class DynamicBatchTrainerCore(" in text for text in source.values()), "the core"
    assert "class DynamicBatchTrainer(" in source[builds], "precondition: the adapter's modules"

    def private(names: Any) -> set[str]:
        return {name for each in names for name in each if name[0] == "_"}

    trainers = private(_compat.touched(host).values())
    models = private(host.touched_models.values())
    found = [
        f"{path.name}: {name}"
        for path, text in source.items()
        if path.name != "_compat.py" or path.parent != CORE
        for name in sorted(trainers | (models if path != builds else set()))
        if name in text
    ]
    assert not found, f"private names only in the core's _compat (and the host's): {found}"


# -- what a host chooses: how its causal LMs take a packed row's mask ---------------------------
class _Base(paddle.nn.Layer):  # type: ignore[misc]
    def forward(self, input_ids: Any, position_ids: Any = None, **masks: Any) -> Any:
        return input_ids


class TinyForCausalLM(paddle.nn.Layer):  # type: ignore[misc]
    """A causal LM by its shape only: its forward takes FlashMask's column form."""

    base_model_prefix = "tiny"

    def __init__(self) -> None:
        super().__init__()
        self.tiny = _Base()

    def forward(
        self,
        input_ids: Any,
        position_ids: Any = None,
        attn_mask_startend_row_indices: Any = None,
        labels: Any = None,
    ) -> Any:
        return input_ids


def flashmask(accepts: bool) -> CausalPacking:
    return CausalPacking(
        mask_field="attn_mask_startend_row_indices",
        mask="FlashMask's attn_mask_startend_row_indices",
        models="the host's decoders",
        examples="the host's TinyForCausalLM",
        accepts=lambda base: accepts and isinstance(base, _Base),
    )


@pytest.mark.parametrize("field", MASK_FIELDS)
def test_the_packed_rows_hold_the_mask_in_the_hosts_field(field: str) -> None:
    """A causal LM's rows carry the mask in the one field its host names, in that field's form
    (the dense bool block mask, or FlashMask's column form), and no other mask."""
    collate = pack_collator(PACKS, Packed(CAUSAL_LM, "labels", 0, 8, field))
    batch = collate([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}, {"input_ids": [6]}])
    assert set(batch) == {"input_ids", "position_ids", field, "labels"}, sorted(batch)
    rows, width = batch["input_ids"].shape
    shape = {"attention_mask": [rows, width, width], "attn_mask_startend_row_indices": None}
    if shape[field] is not None:
        assert list(batch[field].shape) == shape[field]
    else:
        assert list(batch[field].shape) == [rows, 1, width, 1], "FlashMask's causal form"


def test_a_host_that_takes_flashmask_packs_for_its_causal_lm() -> None:
    packed = packed_model(TinyForCausalLM(), "labels", 8, flashmask(True))
    assert (packed.kind, packed.mask_field) == (CAUSAL_LM, "attn_mask_startend_row_indices")
    with pytest.raises(InputTypeError, match=r"does not take FlashMask's .* as given, as the host"):
        packed_model(TinyForCausalLM(), "labels", 8, flashmask(False))


def test_a_host_names_only_a_mask_the_collator_builds() -> None:
    with pytest.raises(InputError, match="mask_field must be one of 'attention_mask'"):
        CausalPacking(mask_field="mask", mask="", models="", examples="", accepts=bool)
