"""The PaddleFormers adapter's own parts, checked when the Trainer is made (no training): its
names, the private names it touches, the releases it runs on, PaddleFormers' defaults set
and logged (NOTE [ PaddleFormers' defaults ] in ``dynbatch/integrations/paddleformers/adapter.py``),
and bad input named: paddlenlp's arguments, parallelism beyond data parallel, a model the packed
rows cannot drive, an attention backend that would ignore their mask."""

from __future__ import annotations

import ast
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
import paddle
import test_cross_references
import test_exported_members
import test_hosts
from pf_toy import classifier, fresh_names, make_args, tiny_llama
from trainer_toy import Reviews, review_data

import dynbatch.integrations.paddleformers as integration
from dynbatch import InputError, InputTypeError
from dynbatch.integrations.paddleformers import DynamicBatchTrainer
from dynbatch.integrations.paddleformers.adapter import PADDLEFORMERS

SRC = Path(integration.__file__).parents[1]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """PaddleFormers' log records (its logger does not propagate to the root's)."""
    monkeypatch.setattr(PADDLEFORMERS.logger.logger, "propagate", True)
    with caplog.at_level(logging.INFO):
        yield caplog


def trainer(args: Any, model: Any = None, **kw: Any) -> DynamicBatchTrainer:
    with fresh_names():
        model = model or classifier()
        data = review_data(Reviews(24))
        return DynamicBatchTrainer(model=model, args=args, time_model=None, **data, **kw)


def test_the_package_has_the_paddlenlp_adapters_public_names() -> None:
    tree = ast.parse((SRC / "paddlenlp" / "__init__.py").read_text(encoding="utf-8"))
    (paddlenlps,) = (
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    )
    assert integration.__all__ == paddlenlps
    for name in integration.__all__:
        assert getattr(integration, name) is not None, name
    assert DynamicBatchTrainer.host is PADDLEFORMERS


def test_every_name_touched_still_exists_in_paddleformers() -> None:
    """tests/test_hosts.py's checks, here where PaddleFormers is installed."""
    test_hosts.check_touched_names("paddleformers")
    test_hosts.check_private_names("paddleformers")


@pytest.mark.parametrize("module", [integration.__name__, f"{integration.__name__}.adapter"])
def test_every_module_declares_what_it_exports_and_its_references_resolve(module: str) -> None:
    """tests/test_exported_members.py's and test_cross_references.py's checks, here where
    PaddleFormers is installed."""
    test_exported_members.test_every_module_declares_what_it_exports(module)
    test_cross_references.test_every_role_in_the_docstrings_resolves(module)


def test_a_release_outside_the_supported_range_is_refused_at_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.metadata.version

    def newer(name: str) -> str:
        return "1.3.0" if name == "paddleformers" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", newer)
    with pytest.raises(
        InputError,
        match=r"runs on paddleformers>=1\.2,<1\.3 .* got paddleformers "
        r"1\.3\.0 installed: pip install paddleformers==1\.2\.0",
    ):
        importlib.reload(integration)
    monkeypatch.undo()
    importlib.reload(integration)  # as imported: the release installed is in the range
    for version in ("1.1.9", "2.0.0", "dev"):
        with pytest.raises(InputError, match=f"got paddleformers {version} installed"):
            integration._check_version(version)
    integration._check_version("1.2.5")


def test_paddleformers_defaults_that_cannot_work_are_set_on_the_trainers_copy_and_logged(
    tmp_path: Path, logs: Any
) -> None:
    """The flex checkpoint format (its resume skips dynbatch's hook) and amp_master_grad
    (its gradients are not the ones dynbatch scales) are set on the Trainer's copy of the
    arguments, each with its reason in the log; the user's arguments are left as given."""
    args = make_args(tmp_path, bf16=True, amp_master_grad=True)  # allowed with bf16
    assert (args.save_checkpoint_format, args.load_checkpoint_format) == ("flex_checkpoint",) * 2
    made = trainer(args)
    assert made.args is not args
    assert (made.args.save_checkpoint_format, made.args.load_checkpoint_format) == (None, None)
    assert made.args.amp_master_grad is False
    assert args.amp_master_grad and args.save_checkpoint_format == "flex_checkpoint", "as given"
    said = [r.getMessage() for r in logs.records if r.getMessage().startswith("dynbatch: ")]
    assert any(
        "save_checkpoint_format='flex_checkpoint' and load_checkpoint_format='flex_checkpoint' "
        "set to None"
        in line
        and "without the Trainer hook where dynbatch restores its plan" in line
        for line in said
    ), said
    warned = [r for r in logs.records if "amp_master_grad=True set to False" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING
    assert "each update would be their sum" in warned[0].getMessage()


def test_without_args_the_default_arguments_run_on_a_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PaddleFormers' own TrainingArguments() refuse its default amp_master_grad on a CPU."""
    monkeypatch.chdir(tmp_path)  # the default output_dir, tmp_trainer, is relative
    with pytest.raises(ValueError, match="amp_master_grad"):
        PADDLEFORMERS.training_arguments(output_dir="tmp_trainer")
    made = trainer(None)
    assert made.args.amp_master_grad is False and not made.args.sharding
    assert made.args.per_device_train_batch_size == 8, "PaddleFormers' default batch"


class Decoder(paddle.nn.Layer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.embed = paddle.nn.Embedding(60, 8)

    def forward(
        self, input_ids: Any, position_ids: Any = None, attn_mask_startend_row_indices: Any = None
    ) -> Any:
        return self.embed(input_ids)


class NoMaskForCausalLM(paddle.nn.Layer):  # type: ignore[misc]
    """A causal LM taking a dense attention_mask, not FlashMask's."""

    base_model_prefix = "decoder"

    def __init__(self) -> None:
        super().__init__()
        self.decoder = Decoder()

    def forward(self, input_ids: Any, position_ids: Any = None, attention_mask: Any = None) -> Any:
        return self.decoder(input_ids)


class OwnForCausalLM(NoMaskForCausalLM):
    """Takes FlashMask's field, but its attention is no PaddleFormers decoder's."""

    def forward(
        self, input_ids: Any, position_ids: Any = None, attn_mask_startend_row_indices: Any = None
    ) -> Any:
        return self.decoder(input_ids)


BAD: list[tuple[str, dict[str, Any], type, str]] = [
    (
        "paddlenlp's keyword",
        {"tensor_parallel_degree": 2},
        InputTypeError,
        "tensor_parallel_degree is paddlenlp's; PaddleFormers calls it tensor_model_parallel_size",
    ),
    (
        "paddlenlp's field set on args",
        {"args": {"set": {"recompute": True}}},
        InputError,
        r"args.recompute is paddlenlp's; PaddleFormers calls it recompute_granularity",
    ),
    (
        "paddlenlp's TrainingArguments",
        {
            "args": type(
                "TrainingArguments", (), {"__module__": "paddlenlp.trainer.training_args"}
            )()
        },
        InputTypeError,
        r"args must be a paddleformers.trainer.TrainingArguments, got "
        r"paddlenlp.trainer.training_args.TrainingArguments",
    ),
    (
        "a sharded optimizer",
        {"args": {"set": {"sharding_parallel_size": 2}}},
        InputError,
        r"data parallelism only, got args.sharding_parallel_size=2: make the TrainingArguments "
        r"with sharding=\"\"",
    ),
    (
        "tensor parallel",
        {"args": {"set": {"tensor_model_parallel_size": 2}}},
        InputError,
        r"got args.tensor_model_parallel_size=2: make the TrainingArguments with "
        r"tensor_model_parallel_size=1",
    ),
    (
        "a forward without the FlashMask field",
        {"model": NoMaskForCausalLM, "pack_len": 40},
        InputTypeError,
        r"got model=NoMaskForCausalLM: its forward does not take position_ids and "
        r"attn_mask_startend_row_indices",
    ),
    (
        "no PaddleFormers decoder",
        {"model": OwnForCausalLM, "pack_len": 40},
        InputTypeError,
        r"its base model \(model.decoder\) does not take FlashMask's "
        r"attn_mask_startend_row_indices as given, as PaddleFormers' decoders do",
    ),
    (
        "sdpa attention",
        {"model": lambda: tiny_llama(attention="sdpa"), "pack_len": 40},
        InputError,
        r"LlamaForCausalLM's config._attn_implementation='sdpa' ignores "
        r"attn_mask_startend_row_indices .* set config._attn_implementation to 'eager'",
    ),
    (  # an outside tester's: accepted, it failed at the first step (FLAGS_cudnn_deterministic)
        "flashmask on a CPU",
        {"model": lambda: tiny_llama(attention="flashmask"), "pack_len": 40},
        InputError,
        r"_attn_implementation='flashmask' runs FlashMask's CUDA kernel, which this paddle "
        r"\(cpu\) has not: set config._attn_implementation to 'eager'",
    ),
]


@pytest.mark.parametrize(("case", "change", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(
    tmp_path: Path, case: str, change: dict[str, Any], error: type, message: str
) -> None:
    change = dict(change)
    args = change.pop("args", {})
    if isinstance(args, dict):
        made = make_args(tmp_path)
        for name, value in args.get("set", {}).items():
            setattr(made, name, value)  # after __post_init__, as a ported script might
        args = made
    model = change.pop("model", None)
    with fresh_names():
        model = None if model is None else model()
    with pytest.raises(error, match=message):
        trainer(args, model, **change)
