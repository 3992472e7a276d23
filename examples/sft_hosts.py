"""What each runner of ``sft_causal_lm.py`` takes from its framework: paddlenlp or PaddleFormers.

NOTE [ one Trainer runner, two hosts ]
    ``--runner trainer`` (paddlenlp's ``Trainer``) and ``--runner paddleformers`` (PaddleFormers'
    ``Trainer``, paddlenlp's successor) are one runner, ``sft_mode.train_trainer``, given a
    :class:`TrainerHost`: the two Trainers share one structure, at the same module paths
    (``<package>.trainer``, ``<package>.trainer.trainer_callback``), and so do dynbatch's
    adapters (``dynbatch.integrations.<package>``). What differs is held here, and only here:

    * **the model.** paddlenlp: a tiny ``Qwen2ForCausalLM``. PaddleFormers' ``Qwen2ForCausalLM``
      needs ``paddlefleet`` (not on PyPI), so there a tiny ``LlamaForCausalLM`` of the same
      sizes, with ``fuse_rms_norm=False`` (the fused kernel has no CPU build) and eager
      attention (``sdpa`` ignores a packed row's mask; eager honours FlashMask's
      ``attn_mask_startend_row_indices``, which the ``pack`` mode's rows carry).
    * **the TrainingArguments of one CPU process** (NOTE [ paddleformers on one CPU process ] in
      ``tests/paddleformers/test_host.py``): PaddleFormers' defaults refuse a float32 run
      (``amp_master_grad``), load checkpoints through fleet's hybrid group
      (``flex_checkpoint``) and shard the optimizer (``stage1``). Both modes get the same
      arguments, so the stock Trainer (``fixed``) and ``DynamicBatchTrainer`` run alike.
    * **a line it logs at every step**, ``[DataLoad global_step: N]``: left out of the output,
      as the Trainer's dict of each log is (``PrinterCallback``).
    * **its info lines** (NOTE [ PaddleFormers' log lines ]): left out, but dynbatch's own.

NOTE [ PaddleFormers' log lines ]
    A PaddleFormers run of the example logged about 1,000 lines at info level (its arguments,
    one by one, the model's loading, each step's data), for half a minute of training, and
    dynbatch's own lines (the plan's split, what it set on the arguments) were lost among
    them. The host's ``quiet_below="WARNING"`` leaves out the framework's records below a
    warning, except dynbatch's, which start ``dynbatch:`` and go through the same logger;
    warnings and errors still show. docs/paddleformers.md says how to do the same in a script.

    Both models compare the logits at ``t`` with the label at ``t`` (PaddleFormers'
    ``CriterionLayer`` as paddlenlp's criterion), so the stock Trainer's batches get labels
    moved left by one on either host (NOTE [ paddlenlp's labels are already shifted ] in
    ``sft_mode.py``). The loop runner builds paddlenlp's model. Nothing here imports a
    framework until a mode runs: each runner needs only its own, and asked for in a Python
    without it, the example says in one line what installs it (:meth:`TrainerHost.missing`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

__all__ = ["HOSTS", "PADDLEFORMERS", "PADDLENLP", "RUNNERS", "TINY", "TrainerHost"]

#: The tiny causal LM: a head width of 16 and a vocabulary of 1,000 whose logits, n·L·V,
#: are most of the activations (what the calibrated cost has to find).
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 192,
}


@dataclass(frozen=True)
class TrainerHost:
    """A framework as the example's runners reach it (NOTE [ one Trainer runner, two hosts ]).

    Attributes:
        package: the framework's import name: ``<package>.trainer`` holds its Trainer and
            ``dynbatch.integrations.<package>`` dynbatch's adapter of it.
        model: the tiny model's family, in the table and the calibration's file name.
        model_class: ``module:Class`` of the causal LM, built from ``config_class``.
        config_class: ``module:Class`` of its config.
        model_config: the config's arguments besides the sizes and the vocabulary's.
        cpu_args: the ``TrainingArguments`` one CPU process needs, besides the example's own.
        install: what installs the framework, for the one line that says it is missing.
        quiet: the starts of the framework's log lines left out of the output.
        quiet_below: a level (``"WARNING"``): the framework's records below it are left out,
            but dynbatch's own (NOTE [ PaddleFormers' log lines ]); None keeps them all.
    """

    package: str
    model: str
    model_class: str
    config_class: str
    install: str
    model_config: Mapping[str, Any] = field(default_factory=dict)
    cpu_args: Mapping[str, Any] = field(default_factory=dict)
    quiet: tuple[str, ...] = ()
    quiet_below: str | None = None

    def missing(self, runner: str) -> str | None:
        """Why ``--runner runner`` cannot run in this Python, in one line, or None.

        >>> nowhere = TrainerHost("no_such_framework", "Tiny", "m:M", "m:C", "pip install it")
        >>> nowhere.missing("tiny")
        '--runner tiny needs no_such_framework, which this Python lacks: pip install it'
        """
        if importlib.util.find_spec(self.package) is not None:
            return None
        return f"--runner {runner} needs {self.package}, which this Python lacks: {self.install}"

    def trainer(self) -> ModuleType:
        """``<package>.trainer``: ``Trainer``, ``TrainingArguments``, ``TrainerCallback``."""
        self._quieten()
        return importlib.import_module(f"{self.package}.trainer")

    def printer_callback(self) -> type:
        """The Trainer's callback that prints the dict of each log."""
        module = importlib.import_module(f"{self.package}.trainer.trainer_callback")
        return module.PrinterCallback  # type: ignore[no-any-return]

    def adapter(self) -> ModuleType:
        """``dynbatch.integrations.<package>``: ``DynamicBatchTrainer``, ``token_cross_entropy``."""
        return importlib.import_module(f"dynbatch.integrations.{self.package}")

    def build_model(self, meta: Mapping[str, Any], max_len: int) -> Any:
        """The tiny causal LM with random weights, over ``meta``'s vocabulary, for ``max_len``
        positions."""
        config = _load(self.config_class)(
            vocab_size=meta["vocab_size"],
            max_position_embeddings=max_len,
            pad_token_id=meta["pad_id"],
            bos_token_id=meta["bos_id"],
            eos_token_id=meta["eos_id"],
            use_cache=False,  # training: no key/value cache
            tie_word_embeddings=False,
            **TINY,
            **self.model_config,
        )
        return _load(self.model_class)(config)

    def _quieten(self) -> None:
        """Leave out the framework's log lines that start with one of :attr:`quiet`, and those
        below :attr:`quiet_below` but dynbatch's."""
        if not self.quiet and self.quiet_below is None:
            return
        framework = importlib.import_module(f"{self.package}.utils.log").logger.logger
        if not any(isinstance(f, _Drop) for f in framework.filters):
            below = logging.getLevelName(self.quiet_below) if self.quiet_below else 0
            framework.addFilter(_Drop(self.quiet, below))


class _Drop(logging.Filter):
    """Drops the records whose message starts with one of ``starts``, and those below the level
    ``below`` whose message is not dynbatch's (``dynbatch: ...``).

    >>> drop = _Drop(("[DataLoad",), logging.WARNING)
    >>> def kept(level, msg):
    ...     return drop.filter(logging.LogRecord("pf", level, "", 0, msg, None, None))
    >>> kept(logging.INFO, "loading weights"), kept(logging.INFO, "dynbatch: the plan")
    (False, True)
    >>> kept(logging.WARNING, "a warning"), kept(logging.WARNING, "[DataLoad global_step: 3]")
    (True, False)
    """

    def __init__(self, starts: tuple[str, ...], below: int = 0) -> None:
        super().__init__()
        self.starts = starts
        self.below = below

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(self.starts):
            return False
        return record.levelno >= self.below or message.startswith("dynbatch")


def _load(path: str) -> Any:
    """The object at ``module:name``."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


PADDLENLP = TrainerHost(
    package="paddlenlp",
    model="Qwen2",
    model_class="paddlenlp.transformers:Qwen2ForCausalLM",
    config_class="paddlenlp.transformers:Qwen2Config",
    install='pip install -e ".[cpu,examples]" (paddlenlp 3.0.0b4 and its pins; not beside '
    "paddleformers, whose pins conflict: make demo builds .venv)",
)

PADDLEFORMERS = TrainerHost(
    package="paddleformers",
    model="Llama",
    model_class="paddleformers.transformers:LlamaForCausalLM",
    config_class="paddleformers.transformers:LlamaConfig",
    install='pip install -e ".[cpu,paddleformers]" in a virtual environment of its own '
    "(paddlenlp's pins conflict with it; make test builds one, .venv-pf)",
    model_config={"fuse_rms_norm": False, "_attn_implementation": "eager"},
    cpu_args={
        "amp_master_grad": False,
        "save_checkpoint_format": None,
        "load_checkpoint_format": None,
        "sharding": "",
    },
    quiet=("[DataLoad global_step:",),
    quiet_below="WARNING",
)

#: Each --runner's framework: the loop trains paddlenlp's model in a hand-written loop.
HOSTS = {"loop": PADDLENLP, "trainer": PADDLENLP, "paddleformers": PADDLEFORMERS}
RUNNERS = tuple(HOSTS)
