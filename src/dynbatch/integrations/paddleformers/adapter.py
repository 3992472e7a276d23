"""The PaddleFormers adapter: PaddleFormers' names as the core's
:class:`~dynbatch.integrations.core.Host`, and its ``Trainer`` with the core mixed in.

Everything else is :mod:`dynbatch.integrations.core`'s, shared with every adapter
(NOTE [ one core, one host per adapter ] in :mod:`dynbatch.integrations.core.host`). What is
PaddleFormers' own is here: its defaults (NOTE [ PaddleFormers' defaults ]), its parallel degrees'
names, and how its causal LMs take a packed row's mask
(NOTE [ PaddleFormers' attention and the packed mask ]).

NOTE [ PaddleFormers' defaults ]
    paddleformers 1.2.0's ``TrainingArguments`` defaults differ from paddlenlp's in four places
    that meet dynbatch, and one switch of its own cannot resume (checked on a CPU; the GPU's
    paths named are read from its source):

    * ``amp_master_grad=True`` is refused by ``TrainingArguments`` itself unless fp16 or bf16 is
      on (``[ConfigConflict] amp_master_grad``). A user's arguments already exist when the
      Trainer sees them, so a float32 run makes them with ``amp_master_grad=False``; with
      ``args=None`` the Trainer makes its default ones so (the host's ``default_args``). With
      fp16 or bf16 it is allowed, and it moves each gradient into a float32 ``main_grad``
      (``MixPrecisionLayer``), leaving ``grad`` empty: dynbatch's update scales ``grad`` to the
      mean over the update (NOTE [ one update engine ] in :mod:`dynbatch.paddle.update`), so
      it would silently step on the sum. The Trainer's copy turns it off, logged at warning
      level (:func:`fix_args`).
    * ``sharding="stage1"`` shards the optimizer over the ranks: a single process resets it,
      but on several ranks ``TrainingArguments`` builds a sharded group (and with the default
      ``split_param=True`` asserts ``amp_master_grad``). dynbatch's update is data parallel (each
      rank a whole model and optimizer), so a sharded run is refused by name
      (``args.sharding_parallel_size``), saying to make the arguments with ``sharding=""``;
      ``args=None`` makes them so.
    * ``save_checkpoint_format`` and ``load_checkpoint_format`` default to
      ``"flex_checkpoint"``, whose resume replaces the Trainer's call that loads the optimizer,
      the hook where dynbatch restores its plan: a flex resume would skip it silently, and
      train the wrong batches. (On a CPU it also fails:
      ``'Fleet' object has no attribute '_hcg'`` in one process, ``No available device found``
      on gloo ranks.) So the Trainer's copy of the arguments sets each ``"flex_checkpoint"`` to
      None, PaddleFormers' plain format (``model_state.pdparams``, ``optimizer.pdopt``), on every
      device, and logs it (:func:`fix_args`).
    * ``save_to_hf=True`` saves a ``PretrainedModel``'s weights as ``model.safetensors``, and
      PaddleFormers' resume reads only ``model_state.pdparams`` ("Can't find a valid
      checkpoint"): the copy sets it False and logs it, like the formats.
    * ``unified_checkpoint=True`` (or a format ``"unified_checkpoint"``, which the switch
      sets where the formats are None) saves a checkpoint that PaddleFormers 1.2's own
      Trainer does not resume: on the tests' tiny ``LlamaForCausalLM`` its load refuses the
      weights it saved (``k_proj.weight receives a shape [32, 64], but the expected shape is
      [64, 32]``). The run took it and failed only at resume, after the training it meant to
      keep. It is off by default, so given it is the user's choice, not a default to set
      aside: it is refused when the Trainer is made, naming the argument and what to set
      (:func:`refuse_unified`); no fix is real while the stock Trainer cannot resume it
      (``tests/paddleformers/test_pf_unified_checkpoint.py`` fails when a release does).

    paddlenlp's names of ``TrainingArguments`` fields that PaddleFormers renamed or dropped
    (``tensor_parallel_degree``, ``recompute``, ...) are named when given to the Trainer or set
    on ``args`` (the host's ``foreign_arguments``): PaddleFormers would never read them.

NOTE [ PaddleFormers' attention and the packed mask ]
    PaddleFormers' causal LMs take a packed row's mask as FlashMask's
    ``attn_mask_startend_row_indices`` (int32 ``[R, 1, P, 1]``, :class:`~dynbatch.PackCollator`'s
    ``return_startend=True``) and ``position_ids`` restarting at each sample. Which attention runs
    is ``config._attn_implementation``, and they differ: ``"eager"`` builds the dense block mask
    from the indices (a sample alone in its row, checked on the CPU against each sample run
    alone), ``"flashmask"`` takes them as given (a GPU, fp16 or bf16), but ``"sdpa"`` builds the
    mask and then calls paddle's ``scaled_dot_product_attention`` with ``is_causal=True``, which
    ignores a mask: each token would attend to the samples before it in its row. So packing
    accepts a PaddleFormers ``PretrainedModel`` whose attention is ``"eager"`` or
    ``"flashmask"``, and refuses any other by name, saying which to set
    (:func:`mask_honoured`).
"""

from __future__ import annotations

import inspect
from typing import Any

import paddle
from paddleformers.trainer import Trainer  # the host's, subclassed
from paddleformers.transformers.model_utils import PretrainedModel
from paddleformers.utils.log import logger

from ..._checks import InputError
from ..core import CausalPacking, DynamicBatchTrainerCore, Host, framework_names

__all__ = [
    "FLEX",
    "HONOURED",
    "PADDLEFORMERS",
    "UNIFIED",
    "DynamicBatchTrainer",
    "configured_attention",
    "fix_args",
    "mask_honoured",
    "refuse_unified",
    "takes_startend",
]

#: The checkpoint format whose resume skips dynbatch's hook (NOTE [ PaddleFormers' defaults ]).
FLEX = "flex_checkpoint"
#: The attention backends that honour ``attn_mask_startend_row_indices`` as packed rows need
#: (NOTE [ PaddleFormers' attention and the packed mask ]).
HONOURED = ("eager", "flashmask")
_FORMATS = ("save_checkpoint_format", "load_checkpoint_format")
#: The checkpoint format PaddleFormers 1.2's own Trainer does not resume (the same NOTE).
UNIFIED = "unified_checkpoint"


def refuse_unified(args: Any) -> None:
    """Refuse PaddleFormers' unified checkpoint by name (NOTE [ PaddleFormers' defaults ])."""
    given = [f"unified_checkpoint={args.unified_checkpoint!r}"] * bool(
        getattr(args, "unified_checkpoint", False)
    )
    given += [f"{n}={UNIFIED!r}" for n in _FORMATS if getattr(args, n, None) == UNIFIED]
    if given:
        raise InputError(
            f"{' and '.join(given)}: PaddleFormers 1.2's unified checkpoint does not resume "
            "(its own Trainer refuses the weights it saved, e.g. a LlamaForCausalLM's "
            "transposed k_proj), so the run would fail at resume_from_checkpoint, after the "
            "training it meant to keep: make the TrainingArguments with "
            "unified_checkpoint=False and save_checkpoint_format=None, "
            "load_checkpoint_format=None (PaddleFormers' plain checkpoints, which dynbatch "
            "resumes exactly)"
        )


def fix_args(args: Any) -> Any:
    """``args`` (the Trainer's copy) with each ``"flex_checkpoint"`` format set to None,
    ``save_to_hf`` and ``amp_master_grad`` off, each change logged; a unified checkpoint
    refused (NOTE [ PaddleFormers' defaults ])."""
    refuse_unified(args)
    flex = [name for name in _FORMATS if getattr(args, name) == FLEX]
    if flex:
        for name in flex:
            setattr(args, name, None)
        logger.info(
            f"dynbatch: {' and '.join(f'{n}={FLEX!r}' for n in flex)} set to None, "
            "PaddleFormers' plain checkpoints (model_state.pdparams, optimizer.pdopt): a flex "
            "checkpoint resumes without the Trainer hook where dynbatch restores its plan, so "
            "the resumed run would train other batches (and on a CPU its resume fails)"
        )
    if getattr(args, "save_to_hf", False):
        args.save_to_hf = False
        logger.info(
            "dynbatch: save_to_hf=True set to False: it saves a model's weights as "
            "model.safetensors, which PaddleFormers' resume does not read (it looks for "
            "model_state.pdparams), so resume_from_checkpoint would fail; export a Hugging "
            "Face copy after training with save_model on Trainer arguments of your own"
        )
    if args.amp_master_grad:
        args.amp_master_grad = False
        logger.warning(
            "dynbatch: amp_master_grad=True set to False: it keeps each gradient in a float32 "
            "main_grad beside the parameter, which dynbatch's update does not scale to the mean "
            "over the update's samples or tokens (each update would be their sum); the "
            "gradients stay in the parameters' own dtype. Make the TrainingArguments with "
            "amp_master_grad=False to train so without this line"
        )
    return args


def takes_startend(base_model: Any) -> bool:
    """Whether ``base_model`` is a PaddleFormers decoder taking FlashMask's
    ``attn_mask_startend_row_indices`` (its attention chosen by its config)."""
    if not isinstance(base_model, PretrainedModel):
        return False
    try:
        takes = "attn_mask_startend_row_indices" in inspect.signature(base_model.forward).parameters
    except (TypeError, ValueError):
        return False
    return takes and hasattr(getattr(base_model, "config", None), "_attn_implementation")


def configured_attention(model: Any) -> str | None:
    """``"flashmask"`` where ``model``'s ``config._attn_implementation`` runs FlashMask (it takes
    the indices as given); None for ``"eager"``, which builds the dense block mask from them."""
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return "flashmask" if backend == "flashmask" else None


def mask_honoured(model: Any, pack_len: int) -> None:
    """Refuse packing where ``model``'s attention backend would ignore the packed mask
    (NOTE [ PaddleFormers' attention and the packed mask ])."""
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None)
    where = f"pack_len={pack_len}: {type(model).__name__}'s config._attn_implementation={backend!r}"
    choices = (
        "set config._attn_implementation to 'eager' (any device) or 'flashmask' (a GPU, fp16 or "
        "bf16) before the model is built, or pass pack_len=None"
    )
    if backend not in HONOURED:
        why = " (sdpa runs paddle's scaled_dot_product_attention with is_causal=True)"
        raise InputError(
            f"{where} ignores attn_mask_startend_row_indices in PaddleFormers 1.2"
            f"{why if backend == 'sdpa' else ''}, so each token of a packed row would attend to "
            f"the samples before it: {choices}"
        )
    if backend == "flashmask" and not paddle.device.is_compiled_with_cuda():
        raise InputError(  # its kernel is CUDA's: on a CPU it fails at the first step
            f"{where} runs FlashMask's CUDA kernel, which this paddle "
            f"({paddle.device.get_device()}) has not: {choices}"
        )


def _paddlenlps(name: str) -> str:
    return f"paddlenlp's; PaddleFormers calls it {name}"


#: paddleformers 1.2.0's Trainer as the core reaches it.
PADDLEFORMERS = Host(
    name="paddleformers",
    written_for="1.2.0",
    **framework_names("paddleformers"),
    parallel_degrees={
        "tensor_model_parallel_size": "tensor_model_parallel_size=1",
        "pipeline_model_parallel_size": "pipeline_model_parallel_size=1",
        "sharding_parallel_size": 'sharding="" (its default "stage1" shards the optimizer)',
        "sep_parallel_size": "sep_parallel_size=1",
        "context_parallel_size": "context_parallel_size=1",
        "expert_model_parallel_size": "expert_model_parallel_size=1",
    },
    causal_packing=CausalPacking(
        mask_field="attn_mask_startend_row_indices",
        mask="FlashMask's attn_mask_startend_row_indices",
        models="PaddleFormers' decoders",
        examples="PaddleFormers' LlamaForCausalLM or Qwen2ForCausalLM",
        accepts=takes_startend,
        check=mask_honoured,
        attention=configured_attention,
    ),
    # the model classes (by import path) whose private names are read: the attention backend
    touched_models={
        "paddleformers.transformers.configuration_utils.PretrainedConfig": (
            "_attn_implementation",
        ),
    },
    fix_args=fix_args,
    default_args={"amp_master_grad": False, "sharding": ""},
    foreign_arguments={
        "tensor_parallel_degree": _paddlenlps("tensor_model_parallel_size"),
        "pipeline_parallel_degree": _paddlenlps("pipeline_model_parallel_size"),
        "sharding_parallel_degree": _paddlenlps("sharding_parallel_size"),
        "sep_parallel_degree": _paddlenlps("sep_parallel_size"),
        "context_parallel_degree": _paddlenlps("context_parallel_size"),
        "expert_parallel_degree": _paddlenlps("expert_model_parallel_size"),
        "expert_tensor_parallel_degree": _paddlenlps("expert_tensor_model_parallel_size"),
        "recompute": _paddlenlps("recompute_granularity (e.g. 'full')"),
        "offload_optim": _paddlenlps("tensorwise_offload_optimizer"),
        "refined_recompute": "paddlenlp's; PaddleFormers has no such field",
        "expert_max_capacity": "paddlenlp's; PaddleFormers has no such field",
        "expert_min_capacity": "paddlenlp's; PaddleFormers has no such field",
    },
)


class DynamicBatchTrainer(DynamicBatchTrainerCore, Trainer):  # type: ignore[misc]
    __doc__ = DynamicBatchTrainerCore.__doc__  # every argument described once, on the core
    host = PADDLEFORMERS
