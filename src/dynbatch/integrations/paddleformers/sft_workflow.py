"""dynbatch inside ``paddleformers-cli train``: the SFT workflow's data on dynbatch's batches.

:mod:`.cli_plugin` is the file a YAML names (``custom_register_path:``); importing it calls
:func:`install`, which is everything here. What the workflow is, and where it is entered:

NOTE [ the seams of PaddleFormers' SFT workflow ]
    ``paddleformers-cli train cfg.yaml`` launches ``paddle.distributed.launch`` on
    ``paddleformers/cli/launcher.py``, whose ``_training_function`` parses the YAML and calls
    ``run_sft`` (``cli/train/tuner.py``), which builds the model, the tokenizer, the template, the
    datasets and the collator, fixes ``max_steps``, then makes ``SFTTrainer(...)`` and trains.
    ``custom_register_path`` executes its file while the YAML is parsed, in every training
    process, before ``run_sft`` is called. Three names are looked up only later, at their call,
    so rebinding them is the whole plug-in:

    * ``tuner.run_sft``: :func:`_run_sft` checks the workflow's arguments and refuses what the
      plug-in cannot honour by name, before the model loads (NOTE [ what the plug-in refuses ]);
      it keeps what the user asked (``packing``, ``max_steps``, ``decay_steps``, the ``epoch``
      strategies) and turns PaddleFormers' packing off, so the datasets yield one example an item;
    * ``tuner.run_dpo``: refused by name (a preference pair is one row of three parts there;
      dynamic batching of pairs is another capability);
    * ``sft.workflow.SFTTrainer``: :func:`dynamic_sft_trainer` makes PaddleFormers'
      ``DynamicBatchTrainer`` from the workflow's own model, arguments, datasets and collator.
      (``sft_trainer.SFTTrainer`` is the class's own module: rebinding it there changes nothing
      the workflow calls, and breaks the ``super(SFTTrainer, self)`` of its ``log``.)

NOTE [ the workflow's examples, once an epoch ]
    The workflow's datasets hold its templates, tokenisation, ``max_seq_len`` truncation and the
    examples it skips (those its processor returns None for or fails on). The plug-in reads them
    once, when the trainer is made, into :class:`Examples`: the valid examples in the dataset's
    order, each with its length, computed once. The iterable dataset (the default) streams for
    ever and yields the last item of a pass twice; one pass is read and the repeat dropped (it
    drops invalid examples unseen, so the log counts none for it rather than claim 0). The
    map dataset holds no lengths and, for an index whose example is invalid, returns another
    one; every raw example is processed once and an invalid one is left out, counted in the log.
    The plan then takes each valid example exactly once an epoch. The examples are held in
    memory as token ids (the raw examples are, already, in the map dataset).

NOTE [ the workflow's labels are already shifted ]
    A workflow example is ``token_ids`` and ``labels`` of one length, the label at ``t`` the
    token after ``t`` (prompts ``-100``), and PaddleFormers' models compare the logits at ``t``
    with the label at ``t``. Unpacked, the workflow's own collator pads the batch and the loss is
    :func:`~dynbatch.integrations.core.token_cross_entropy` with ``shift=False``: the exact mean
    over the update's loss tokens. Packed, dynbatch's rows shift the labels themselves (each
    sample's first label hidden), so each example enters them whole, as the ids and labels of
    ``token_ids + [its last label]``: one position more, whose logits no label reads, and the
    same loss tokens, the same targets.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from ..._checks import InputError, check_choice, check_positive_number
from ...paddle.losses import IGNORE_INDEX
from ...plan.option_checks import check_fields
from ...plan.options import FIELDS, PlanOptions
from ...plan.windows import UNITS
from ..core import token_cross_entropy
from ..core.planner import checked_time_model
from . import _cli_compat
from .adapter import DynamicBatchTrainer

__all__ = [
    "ENV",
    "SETTINGS",
    "Examples",
    "dynamic_sft_trainer",
    "install",
    "read_settings",
]

#: The environment variable naming dynbatch's settings for the CLI: a YAML or JSON file.
ENV = "DYNBATCH_CONFIG"
#: The keys that file may hold: the plan options, and the Trainer's own planning keywords.
SETTINGS = frozenset(FIELDS | {"accumulate", "accumulate_target", "cost_file"}) - {"seed"}

#: What the user's YAML asked, kept by :func:`_run_sft` for :func:`dynamic_sft_trainer`.
_ASKED: dict[str, Any] = {}


def read_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """dynbatch's settings from the file ``$DYNBATCH_CONFIG`` names ({} when unset).

    >>> read_settings({})
    {}
    """
    path = (os.environ if environ is None else environ).get(ENV)
    if not path:
        return {}
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{ENV}={path!r} names no file: give a YAML or JSON file of settings")
    text = file.read_text()
    kind = "JSON" if file.suffix == ".json" else "YAML"
    import yaml  # the CLI's own dependency (omegaconf's)

    try:
        loaded = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:  # json's errors are ValueErrors
        raise InputError(f"{ENV}={path!r} does not parse as {kind}: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InputError(
            f"{ENV}={path!r} holds a {type(loaded).__name__}, not a mapping of settings"
        )
    unknown = sorted(set(loaded) - SETTINGS)
    if unknown:
        raise InputError(
            f"{ENV}={path!r}: unknown setting(s) {', '.join(unknown)}; the settings are: "
            f"{', '.join(sorted(SETTINGS))} (the seed is the YAML's seed)"
        )
    settings = dict(loaded)
    cost_file = settings.pop("cost_file", None)
    if cost_file is not None:
        if "cost" in settings:
            raise InputError(f"{ENV}={path!r} gives both cost and cost_file: give one")
        from ...memory.cost import load_cost

        settings["cost"] = load_cost(cost_file)
    try:
        _check_values(settings)
    except InputError as error:  # at the CLI's start, not when the trainer is made
        raise type(error)(f"{ENV}={path!r}: {error}") from None
    return settings


#: Each plan option's default, to check a settings file's values alone.
_DEFAULTS = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(PlanOptions)
}


def _check_values(settings: Mapping[str, Any]) -> None:
    """Each setting's value checked alone, as the plan and the Trainer check it
    (``time_model``, whose kinds are the Trainer's, is checked when the trainer is made)."""
    given = {k: v for k, v in settings.items() if k in FIELDS and k != "time_model"}
    check_fields({**_DEFAULTS, "max_cost": 1.0, "time_model": None, **given})
    if "accumulate" in settings:
        check_choice("accumulate", settings["accumulate"], UNITS)
    if "time_model" in settings:
        _check_time_model(settings)
    target = settings.get("accumulate_target")
    if target is not None:
        target = check_positive_number("accumulate_target", target)
        if settings.get("max_cost") is None or settings.get("update_size") is not None:
            raise InputError(  # the Trainer's own refusal, before the model loads
                "the plan makes its own updates (the fixed batch's recipe without max_cost, "
                f"or update_size): accumulate_target={target:g} would cut them again; leave it "
                "out, or give max_cost without update_size"
            )


def _check_time_model(settings: Mapping[str, Any]) -> None:
    """``time_model`` as the Trainer takes it: the fixed batch's recipe's (no ``max_cost``)."""
    time_model = settings["time_model"]
    if settings.get("max_cost") is not None and time_model not in (None, "auto", "measure"):
        raise InputError(
            f"time_model={time_model!r} is for the fixed batch's recipe, which max_cost "
            f"replaces (max_cost={settings['max_cost']!r}): leave one of the two out"
        )
    checked_time_model(time_model, settings.get("accumulate", "samples"), None)


# -- the workflow's arguments -----------------------------------------------------------------

#: data arguments the plug-in refuses when set, each with what to use instead
#: (NOTE [ what the plug-in refuses ])
_REFUSED_TRUE = {
    "eval_with_do_generation": "evaluation by generation is not planned: set it false",
    "make_offline_data": "making offline data trains nothing: run it without custom_register_path",
}


def _refuse(data_args: Any, model_args: Any) -> None:
    """NOTE [ what the plug-in refuses ]: each by name, before the model loads.

    Whatever the plug-in cannot honour: a ``dataset_type`` other than ``iterable`` or ``map``
    (the offline and pretraining datasets are token streams cut to length, not examples), a
    ``stage`` other than ``SFT``, a ``mix_strategy`` other than ``concat`` (a sampled mix has no
    epoch of examples), generation at evaluation, and making offline data.
    """
    where = "paddleformers-cli train with dynbatch's plug-in (custom_register_path)"
    for name, instead in _REFUSED_TRUE.items():
        if getattr(data_args, name, False):
            raise InputError(f"{where}: {name}=True is not honoured: {instead}")
    checks = (
        ("dataset_type", data_args.dataset_type, ("iterable", "map")),
        ("stage", model_args.stage, ("SFT",)),
        ("mix_strategy", data_args.mix_strategy, ("concat",)),
    )
    for name, value, valid in checks:
        if value not in valid:
            raise InputError(
                f"{where}: {name}={value!r} is not honoured; valid: {', '.join(map(repr, valid))}"
            )


def _run_sft(
    original: Callable[..., Any], model_args: Any, data_args: Any, generating_args: Any, args: Any
) -> Any:
    """The workflow's ``run_sft``, its arguments checked and PaddleFormers' packing turned off
    (NOTE [ the seams of PaddleFormers' SFT workflow ])."""
    _refuse(data_args, model_args)
    read_settings()  # a bad settings file is refused now, before the model loads
    _ASKED.clear()
    # NOTE [ the packing keys ]: padding_free's one row of a batch is rows of its tokens
    free = bool(getattr(data_args, "padding_free", False))
    _ASKED.update(
        packing=bool(data_args.packing) or free,
        how="padding_free"
        if free
        else ("packing: binpacking" if data_args.binpacking else "packing: greedy_intokens")
        if data_args.packing
        else None,
        # rows of a whole example (one position more), or padding_free's of the batch's
        row=-int(args.per_device_train_batch_size) if free else int(data_args.max_seq_len) + 1,
        max_seq_len=int(data_args.max_seq_len),
        max_steps=int(args.max_steps),
        decay_steps=args.decay_steps,
        epoch_strategies=[
            name
            for name in ("save_strategy", "evaluation_strategy", "logging_strategy")
            if str(getattr(getattr(args, name), "value", getattr(args, name))) == "epoch"
        ],
    )
    data_args.packing = False  # each dataset item one example: dynbatch packs
    data_args.binpacking = False
    if free:
        data_args.padding_free = False
    if args.max_steps <= 0:
        # the plan sizes the run (dynamic_sft_trainer): the workflow's estimate of fixed batches
        # is skipped, a pass over the data, and with it its barrier, which on CPU ranks has no
        # process group yet (PaddleFormers' arguments make none on a CPU)
        args.max_steps = 1
    return original(model_args, data_args, generating_args, args)


def _refuse_dpo(*_: Any, **__: Any) -> None:
    raise InputError(
        "paddleformers-cli train with dynbatch's plug-in (custom_register_path): stage='DPO' is "
        "not honoured: PaddleFormers lays out prompt | chosen | rejected in one row, and dynamic "
        "batching of preference pairs is not in this release; remove custom_register_path for DPO"
    )


# -- the workflow's examples ------------------------------------------------------------------


class Examples(paddle.io.Dataset):  # type: ignore[type-arg]
    """The valid examples of a workflow's dataset, once each, and their lengths
    (NOTE [ the workflow's examples, once an epoch ]).

    Attributes:
        items: each example as the workflow's collator takes it, a list of one ``Sequence``.
        lengths: each example's tokens (``len(token_ids)``), int64.
        skipped: the raw examples the workflow's processor left out; None for an iterable
            dataset, which drops them unseen.
        whole: items as whole sequences for dynbatch's rows,
            NOTE [ the workflow's labels are already shifted ]:
            ``{"input_ids", "labels"}``, one token longer.
    """

    def __init__(
        self, items: list[list[Any]], skipped: int | None = 0, whole: bool = False
    ) -> None:
        super().__init__()
        self.items = items
        self.skipped = skipped
        self.whole = whole
        self.lengths = np.array([len(item[0].token_ids) + whole for item in items], dtype=np.int64)

    @classmethod
    def of(cls, dataset: Any, whole: bool = False) -> Examples:
        """The examples of the workflow's ``IteratorSFTDataset`` or ``MapSFTDataset``."""
        if not _cli_compat.is_map_dataset(dataset):  # the IteratorSFTDataset
            items: list[list[Any]] = []
            for item in _cli_compat.generate_sequences(dataset):  # one pass (the stream is endless)
                if items and item is items[-1]:  # the pass's last item, yielded again
                    continue
                if item:  # an estimation's end marker is []
                    items.append(item)
            return cls(items, skipped=None, whole=whole)
        items, skipped = [], 0
        for example in _cli_compat.raw_examples(dataset):
            try:
                sequence = _cli_compat.process_example(dataset, example)
            except Exception:  # the workflow's own rule: an example it cannot process is skipped
                sequence = None
            if sequence is None:
                skipped += 1
            else:
                items.append([sequence])
        return cls(items, skipped=skipped, whole=whole)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        item = self.items[index]
        if not self.whole:
            return item
        sequence = item[0]
        labels = list(sequence.labels)
        last = labels[-1] if labels[-1] != IGNORE_INDEX else 0
        return {
            "input_ids": np.array([*sequence.token_ids, last], dtype=np.int64),
            "labels": np.array([IGNORE_INDEX, *labels], dtype=np.int64),
        }


# -- the trainer ------------------------------------------------------------------------------


def _packing(settings: dict[str, Any]) -> int | None:
    """The rows' length: the settings' ``pack_len``, else with the YAML's packing keys
    NOTE [ the packing keys ]'s rows; None unpacked.

    NOTE [ the packing keys ]
        ``packing: true`` (``greedy_intokens`` or ``binpacking``) packs with dynbatch's packer
        at the fixed batch's updates, rows of ``max_seq_len`` plus the one position a whole
        example adds. ``padding_free: true``, which lays out PaddleFormers' batch as one row of
        its examples, packs the same updates into rows of the fixed batch's tokens,
        ``per_device_train_batch_size`` of the longest whole example: rows priced, and cut
        short, as the model's attention runs them (a dense mask's rows stop where their
        attention would outgrow the fixed batch's; NOTE [ the default budget of packed rows ]
        in :mod:`dynbatch.plan.packs.attention`). With both, padding_free's rows.
    """
    pack_len = settings.pop("pack_len", None)
    if pack_len is None and _ASKED.get("packing"):
        pack_len = _ASKED["row"]  # below 0: padding_free's batch, sized once the lengths are
    return pack_len if pack_len is None else int(pack_len)


def dynamic_sft_trainer(
    model: Any = None,
    args: Any = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    tokenizer: Any = None,
    data_collator: Any = None,
    callbacks: Sequence[Any] | None = None,
    **workflow: Any,
) -> DynamicBatchTrainer:
    """What the workflow gets for ``SFTTrainer(...)``: PaddleFormers' ``DynamicBatchTrainer``
    on the workflow's examples, collator, model and arguments, with ``$DYNBATCH_CONFIG``'s
    settings; ``max_steps``, ``decay_steps`` and the ``epoch`` strategies from the plan."""
    settings = read_settings()
    pack_len = _packing(settings)
    logger = DynamicBatchTrainer.host.logger
    examples = None
    if train_dataset is not None:
        examples = Examples.of(train_dataset, whole=pack_len is not None)
        skipped = (
            " (invalid ones dropped unseen by the iterable dataset, not counted)"
            if examples.skipped is None
            else f", {examples.skipped} skipped"
        )
        logger.info(
            f"dynbatch: {len(examples)} valid examples of {type(train_dataset).__name__}"
            f"{skipped}, {int(examples.lengths.sum())} tokens"
        )
    if pack_len is not None and pack_len < 0:  # NOTE [ the packing keys ]: padding_free
        longest = int(examples.lengths.max()) if examples is not None and len(examples) else 1
        pack_len = -pack_len * longest
        _ASKED["how"] = f"padding_free (rows of up to {pack_len} tokens)"
    if _ASKED.get("max_steps", -1) <= 0:
        args.max_steps = -1  # the workflow's estimate was of fixed batches: the plan decides
    if pack_len is None:  # the workflow's collator and its shifted labels
        settings.setdefault(
            "loss_fn", functools.partial(token_cross_entropy, shift=False, label_key="labels")
        )
    trainer = DynamicBatchTrainer(
        model=model,
        args=args,
        train_dataset=examples,
        eval_dataset=eval_dataset,
        data_collator=data_collator,
        tokenizer=tokenizer,
        callbacks=list(callbacks or []),
        lengths=None if examples is None else examples.lengths,
        pack_len=pack_len,
        **settings,
    )
    if examples is not None:
        _schedule(trainer, args)
    return trainer


def _schedule(trainer: DynamicBatchTrainer, args: Any) -> None:
    """``max_steps``, the decay and the ``epoch`` strategies made the plan's, and logged."""
    steps = trainer.total_steps()
    asked = _ASKED
    said = [f"max_steps={steps}"]
    for target in (trainer.args, args):
        target.max_steps = steps
        if asked.get("decay_steps") is None:
            target.decay_steps = steps
    if asked.get("decay_steps") is None:
        said.append(f"decay_steps={steps}")
    per_epoch = max(1, trainer.steps_per_epoch(0))  # also when max_steps ends the run early
    for name in asked.get("epoch_strategies", []):
        steps_name = {"evaluation_strategy": "eval_steps"}.get(
            name, name.replace("strategy", "steps")
        )
        for target in (trainer.args, args):
            setattr(target, steps_name, per_epoch)
        said.append(f"{steps_name}={per_epoch} (an epoch)")
    how = asked.get("how")
    packed = f"; {how} means dynbatch's rows" if how else ""
    trainer.host.logger.info(
        f"dynbatch: {', '.join(said)}, the plan's optimizer steps (the workflow sized fixed "
        f"batches){packed}"
    )


def install() -> None:
    """Put dynbatch into the CLI's workflow (NOTE [ the seams of PaddleFormers' SFT workflow ])."""
    run_sft = _cli_compat.run_sft()
    if not getattr(run_sft, "dynbatch", False):  # loaded twice: wrapped once
        run_sft = functools.wraps(run_sft)(functools.partial(_run_sft, run_sft))
        run_sft.dynbatch = True  # type: ignore[attr-defined]
    _cli_compat.rebind_workflow(run_sft, _refuse_dpo, dynamic_sft_trainer)
    if not paddle.device.is_compiled_with_cuda():
        # launched with --gpus on a CPU, paddle's launch names no backend, and the arguments
        # then make a parallel context without a process group: the Trainer's first all_reduce
        # fails on two ranks. gloo is the CPU's (its arguments are parsed after this file runs)
        os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
