"""What the core takes from the framework it runs on: one :class:`Host` per adapter.

NOTE [ one core, one host per adapter ]
    paddlenlp's ``Trainer`` and PaddleFormers' (its successor) share one structure, derived
    from Hugging Face's: the same classes, at the same module paths, with the same private
    hooks. So dynbatch's Trainer is written once, in :mod:`dynbatch.integrations.core`, which
    imports neither framework: every name of the framework it needs comes from a
    :class:`Host`, and where the two differ the host holds a field or a hook (``fix_args``,
    the arguments the default ``TrainingArguments`` needs, the names of its parallel degrees,
    the causal LMs' packed mask, the model classes it reads). An adapter is a package of
    ``dynbatch.integrations`` with two pieces:

    * its ``Host``, built from the framework's own names (:func:`framework_names`) and what
      is its own (``paddlenlp/adapter.py`` builds ``PADDLENLP``);
    * its Trainer, the core mixed into the framework's own:
      ``class DynamicBatchTrainer(DynamicBatchTrainerCore, PADDLENLP.trainer): host =
      PADDLENLP``,
      exported by the package with ``require()`` of the framework first.

    ``tests/test_hosts.py`` finds every adapter's ``DynamicBatchTrainer.host`` and checks
    that each name the core and the host touch still exists in the installed framework.

    The core's classes that subclassed a framework's class are mixins, and the few that must
    subclass one (the callbacks) are built per host, once (:func:`host_subclass`). A module-level
    function reaches the host through the trainer it is given (``trainer.host``) or a
    parameter, never through a global "current host": two adapters may run in one process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._checks import InputError

__all__ = [
    "FRAMEWORK_NAMES",
    "MASK_FIELDS",
    "CausalPacking",
    "Host",
    "HostBase",
    "framework_names",
    "host_subclass",
    "keep_args",
]

#: The fields a packed causal LM may take its rows' mask in: the bool block mask ``[R, P, P]``,
#: or FlashMask's column form (NOTE [ one sample, alone in its row ] in
#: :mod:`dynbatch.paddle.pack_collate`).
MASK_FIELDS = ("attention_mask", "attn_mask_startend_row_indices")


def keep_args(args: Any) -> Any:
    """The ``fix_args`` of a host whose Trainer needs no change: ``args`` as they are."""
    return args


def _no_check(model: Any, pack_len: int) -> None:
    """The ``check`` of a host whose causal LMs always honour the packed mask."""


def _dense(model: Any) -> str | None:
    """The ``attention`` of a host whose models' configs name no packed attention layout."""
    return None


@dataclass(frozen=True)
class CausalPacking:
    """How a host's causal LMs take packed rows (NOTE [ the Trainer packs ] in :mod:`.packing`).

    The core packs a causal LM's rows with :class:`~dynbatch.PackCollator` and feeds the model
    ``input_ids``, ``position_ids``, the labels and the rows' mask in the one field named here,
    in the form that field takes: ``"attention_mask"`` for the bool block mask ``[R, P, P]``
    (paddlenlp's decoders use a 3-D mask as given), or ``"attn_mask_startend_row_indices"`` for
    FlashMask's column form (``PackCollator(return_startend=True)``'s).

    Attributes:
        mask_field: the model input the mask goes in: ``"attention_mask"`` or
            ``"attn_mask_startend_row_indices"``.
        mask: that mask in words, for messages (``"a 3-D attention_mask"``).
        models: who takes it as given, for messages (``"paddlenlp's decoders"``).
        examples: models that do, for messages
            (``"paddlenlp's Qwen2ForCausalLM or LlamaForCausalLM"``).
        accepts: ``accepts(base_model) -> bool``: whether the causal LM's base model (under
            its ``base_model_prefix``; None where there is none) uses the mask as given. The
            forward taking ``position_ids`` and ``mask_field`` is checked by the core.
        check: ``check(model, pack_len)``: raise a :class:`~dynbatch.InputError` where
            the host would ignore the mask on this model (paddlenlp under
            ``USE_CASUAL_MASK=True``; PaddleFormers' attention backends that drop it), naming
            what to set; called once the model is accepted.
        attention: ``attention(model) -> str | None``: the attention layout the model's config
            says it runs packed rows with (``"flashmask"``), None where it says none (the
            dense default): the host reads its own config names.
    """

    mask_field: str
    mask: str
    models: str
    examples: str
    accepts: Callable[[Any], bool]
    check: Callable[[Any, int], None] = _no_check
    attention: Callable[[Any], str | None] = _dense

    def __post_init__(self) -> None:
        if self.mask_field not in MASK_FIELDS:
            raise InputError(
                f"mask_field must be one of {', '.join(map(repr, MASK_FIELDS))} (the forms "
                f"PackCollator builds), got mask_field={self.mask_field!r}"
            )


@dataclass(frozen=True, eq=False)
class Host:
    """A framework's ``Trainer`` as the core reaches it (NOTE [ one core, one host per adapter ]).

    Equal only to itself: one per framework. The fields that are the framework's own names
    (``trainer`` to ``trainer_state_file``) are at the same paths in every framework so far:
    ``Host(**framework_names("paddlenlp"), ...)`` imports them.

    Attributes:
        name: the framework's import name, in messages: ``"paddlenlp"``.
        written_for: the release the adapter was written against (``"3.0.0b4"``).
        trainer: ``<name>.trainer.Trainer``.
        training_arguments: ``<name>.trainer.TrainingArguments``.
        trainer_callback: ``<name>.trainer.TrainerCallback``.
        callback_handler: ``<name>.trainer.trainer_callback.CallbackHandler``.
        visualdl_callback: ``<name>.trainer.integrations.VisualDLCallback``.
        train_output: ``<name>.trainer.trainer_utils.TrainOutput``.
        eval_loop_output: ``<name>.trainer.trainer_utils.EvalLoopOutput``.
        eval_prediction: ``<name>.trainer.trainer_utils.EvalPrediction``.
        interval_strategy: ``<name>.trainer.trainer_utils.IntervalStrategy``.
        prefix_checkpoint_dir: ``<name>.trainer.trainer_utils.PREFIX_CHECKPOINT_DIR``.
        nested_concat: ``<name>.trainer.utils.helper.nested_concat``.
        logger: ``<name>.utils.log.logger``.
        trainer_state_file: the file of the Trainer's own state in a checkpoint
            (``<name>.trainer.trainer.TRAINER_STATE_NAME``), for messages.
        parallel_degrees: the ``TrainingArguments`` fields of parallelism beyond data
            parallel (a model or optimizer sharded over ranks), refused above 1, each with the
            ``TrainingArguments`` keyword that keeps it off (``"tensor_parallel_degree=1"``).
        causal_packing: how the host's causal LMs take packed rows.
        touched_models: the model classes the adapter reads private names of, by import path
            (not imported until checked: they load with the user's model), each with those
            names; ``tests/test_hosts.py`` checks them with the Trainer's.
        fix_args: ``fix_args(args) -> args``: the ``TrainingArguments`` the Trainer runs on,
            made right for this host. It is given dynbatch's copy of the user's (one epoch, no
            ``max_steps``, no accumulation: NOTE [ one Trainer epoch holds every real epoch ]
            in :mod:`.run`), may change it (logging what it changed and why) or refuse it, and
            returns what the Trainer is made with; the user's own are never changed. Default
            :func:`keep_args`.
        default_args: keywords of the ``TrainingArguments`` the Trainer makes when given
            ``args=None``, beyond ``output_dir``: where the framework's own defaults refuse to
            run without them.
        foreign_arguments: names the host's ``TrainingArguments`` does not have but another
            framework's does, each with what to say of it: ``"paddlenlp's; PaddleFormers
            calls it tensor_model_parallel_size"``. Given to the Trainer as a keyword, or set on
            ``args``, one is refused with that.
    """

    name: str
    written_for: str
    trainer: type
    training_arguments: type
    trainer_callback: type
    callback_handler: type
    visualdl_callback: type
    train_output: Callable[..., Any]
    eval_loop_output: Callable[..., Any]
    eval_prediction: Callable[..., Any]
    interval_strategy: Any
    prefix_checkpoint_dir: str
    nested_concat: Callable[..., Any]
    logger: Any
    trainer_state_file: str
    parallel_degrees: Mapping[str, str]
    causal_packing: CausalPacking
    touched_models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fix_args: Callable[[Any], Any] = keep_args
    default_args: Mapping[str, Any] = field(default_factory=dict)
    foreign_arguments: Mapping[str, str] = field(default_factory=dict)


#: Where each :class:`Host` field that is a name of the framework lives, under its package:
#: paddlenlp and PaddleFormers keep every one at the same path (:func:`framework_names`).
FRAMEWORK_NAMES = {
    "trainer": "trainer.Trainer",
    "training_arguments": "trainer.TrainingArguments",
    "trainer_callback": "trainer.TrainerCallback",
    "callback_handler": "trainer.trainer_callback.CallbackHandler",
    "visualdl_callback": "trainer.integrations.VisualDLCallback",
    "train_output": "trainer.trainer_utils.TrainOutput",
    "eval_loop_output": "trainer.trainer_utils.EvalLoopOutput",
    "eval_prediction": "trainer.trainer_utils.EvalPrediction",
    "interval_strategy": "trainer.trainer_utils.IntervalStrategy",
    "prefix_checkpoint_dir": "trainer.trainer_utils.PREFIX_CHECKPOINT_DIR",
    "nested_concat": "trainer.utils.helper.nested_concat",
    "logger": "utils.log.logger",
    "trainer_state_file": "trainer.trainer.TRAINER_STATE_NAME",
}


def framework_names(package: str) -> dict[str, Any]:
    """The :class:`Host` fields that are the framework ``package``'s own names, each imported
    from its path in :data:`FRAMEWORK_NAMES`; one that is missing raises ``ImportError``."""
    names = {}
    for name, path in FRAMEWORK_NAMES.items():
        module, _, attribute = f"{package}.{path}".rpartition(".")
        try:
            names[name] = getattr(importlib.import_module(module), attribute)
        except AttributeError:
            raise ImportError(f"cannot import name {attribute!r} from {module!r}") from None
    return names


#: A host's class, to the type checker (``Any``); ``object`` at run time. The core's mixins that
#: stand before one of the host's classes (the Trainer, a callback) and call ``super()`` into it
#: subclass this, so their calls into the host's class type-check as the untyped frameworks'
#: own do (NOTE [ one core, one host per adapter ]).
HostBase: Any = object


_SUBCLASSES: dict[tuple[type, type], type] = {}


def host_subclass(mixin: type, base: type) -> type:
    """The class ``mixin`` then ``base`` (a host's class), made once per pair: the core's
    callbacks on the host's ``TrainerCallback``, its VisualDL fix on the host's own.

    >>> class Greets:
    ...     def hello(self) -> str:
    ...         return "mixin, then " + super().hello()
    >>> class Framework:
    ...     def hello(self) -> str:
    ...         return "framework"
    >>> cls = host_subclass(Greets, Framework)
    >>> cls().hello(), cls.__name__, cls is host_subclass(Greets, Framework)
    ('mixin, then framework', 'Greets', True)
    """
    made = _SUBCLASSES.get((mixin, base))
    if made is None:
        own = {"__module__": mixin.__module__, "__doc__": mixin.__doc__}
        made = _SUBCLASSES[(mixin, base)] = type(mixin.__name__, (mixin, base), own)
    return made
