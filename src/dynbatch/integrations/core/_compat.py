"""Every touch of a host Trainer's private names, in one place.

The rest of the core puts :class:`CompatHooks` before the host's ``Trainer`` and reads as plain
subclassing. :func:`touched` lists each private name used here, by the host's class that has
it; a host's own (its model classes) are its ``touched_models``. ``tests/test_hosts.py`` checks
that the installed framework of every adapter still has every one, so an upgrade that renames
one fails loudly instead of silently skipping a hook. paddlenlp 3.0.0b4's Trainer is the one
these were written for (``Host.written_for`` says each adapter's).

NOTE [ VisualDL and protobuf bools ]
    paddlenlp's ``VisualDLCallback`` writes the arguments with ``add_hparams``;
    visualdl 2.5 stores a bool in an int field, which protobuf >= 5 refuses
    ("Expected an int, got a boolean"), so ``train()`` crashes at once. The
    integration turns each stock ``VisualDLCallback`` into a subclass that
    casts bools to ints for ``add_hparams`` and changes nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import paddle

from .host import Host, HostBase, host_subclass

__all__ = ["CompatHooks", "call_as_forward", "int_hparams_visualdl", "touched"]


def touched(host: Host) -> dict[type, tuple[str, ...]]:
    """Each of ``host``'s classes (and paddle's) whose private (or undocumented) names are
    used here, with those names."""
    return {
        host.trainer: (
            "_save_checkpoint",  # overridden: our state file beside each checkpoint
            "_load_optimizer_and_scheduler",  # overridden: the resume hook, called once on resume
            "_load_rng_state",  # called: ignore_data_skip=True never restores the RNG
            "_prepare_inputs",  # overridden and called: batches to the device, checked first
        ),
        host.visualdl_callback: (
            "_init_summary_writer",  # called: the writer, before add_hparams is wrapped
            "vdl_writer",  # read: the writer (an attribute set in __init__)
        ),
        host.callback_handler: (
            "eval_dataloader",  # set: what callbacks see during our own evaluation loop
        ),
        paddle.DataParallel: (
            "_layers",  # read: the wrapped model, whose forward a packed classifier replaces
        ),
    }


class CompatHooks(HostBase):  # type: ignore[misc]
    """The host ``Trainer``'s private hooks turned into named ones the core overrides: a mixin,
    put before the host's ``Trainer`` (NOTE [ one core, one host per adapter ] in :mod:`.host`).

    * ``save_plan_state(global_step)`` after checkpoint-<global_step> is written;
    * ``load_plan_state(checkpoint)`` on resume, *before* the optimizer is
      loaded (return False to let the Trainer resume its own way);
    * ``check_batch(batch)`` on every batch the Trainer moves to the device (training,
      evaluation and prediction alike), before it does;
    * ``prepare_inputs(batch)``, ``load_rng_state(checkpoint)`` and
      ``set_eval_dataloader(loader)`` call into the Trainer.
    """

    def save_plan_state(self, global_step: int) -> None:  # pragma: no cover - overridden
        pass

    def load_plan_state(self, checkpoint: str) -> bool:  # pragma: no cover - overridden
        return False

    def check_batch(self, batch: Any) -> None:  # pragma: no cover - overridden
        pass

    def _save_checkpoint(self, model: Any, metrics: Any = None) -> None:
        super()._save_checkpoint(model, metrics=metrics)
        self.save_plan_state(int(self.state.global_step))

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        if checkpoint is None or self.args.ignore_load_lr_and_optim:
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        ours = self.load_plan_state(checkpoint)  # everything of ours is checked first
        super()._load_optimizer_and_scheduler(checkpoint)
        if ours:
            self._load_rng_state(checkpoint)

    def _prepare_inputs(self, inputs: Any) -> Any:
        self.check_batch(inputs)
        return super()._prepare_inputs(inputs)

    def prepare_inputs(self, batch: Mapping[str, Any]) -> Any:
        return self._prepare_inputs(batch)

    def set_eval_dataloader(self, loader: Any) -> None:
        self.callback_handler.eval_dataloader = loader


class IntHparamsVisualDL(HostBase):  # type: ignore[misc]
    """VisualDLCallback with bool hparams cast to int (NOTE [ VisualDL and protobuf bools ]): a
    mixin, before the host's ``VisualDLCallback``."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.is_world_process_zero and self.vdl_writer is None:
            self._init_summary_writer(args)
        writer = self.vdl_writer
        if writer is not None and not getattr(writer, "_dynbatch_int_hparams", False):
            add_hparams = writer.add_hparams

            def int_hparams(hparams_dict: Mapping[str, Any], *a: Any, **k: Any) -> Any:
                clean = {
                    key: int(v) if isinstance(v, bool) else v for key, v in hparams_dict.items()
                }
                return add_hparams(clean, *a, **k)

            writer.add_hparams = int_hparams
            writer._dynbatch_int_hparams = True
        return super().on_train_begin(args, state, control, **kwargs)


def int_hparams_visualdl(callbacks: list[Any], host: Host) -> None:
    """Turn each stock ``VisualDLCallback`` of ``host`` in ``callbacks`` into the bool-safe one."""
    stock = host.visualdl_callback
    for callback in callbacks:
        if type(callback) is stock:
            callback.__class__ = host_subclass(IntHparamsVisualDL, stock)


def call_as_forward(model: Any, forward: Callable[..., Any], inputs: Mapping[str, Any]) -> Any:
    """``forward(layer, **inputs)`` as the model's forward, ``layer`` the model unwrapped.

    Under ``paddle.DataParallel`` the wrapper's call readies the gradient all-reduce
    for the backward to come (``prepare_for_backward``); a forward run on the wrapped
    layer alone would skip it, and the ranks' gradients would part silently. So the
    wrapped layer's ``forward`` is ``forward`` for the one call through the wrapper.
    """
    if not isinstance(model, paddle.DataParallel):
        return forward(model, **inputs)
    layer = model._layers
    layer.forward = functools.partial(forward, layer)  # type: ignore[method-assign]
    try:
        return model(**inputs)
    finally:
        del layer.forward
