"""A run's saved sampler state: its form, its digests and its options checked before it loads.

What :meth:`~dynbatch.plan.epochs.Epochs.load_state_dict` refuses, and why
(NOTE [ resume fingerprint ] in :mod:`dynbatch.plan.epochs`): numpy only.
"""

from __future__ import annotations

import hashlib
import numbers
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_int, check_replicas
from .lengths import is_pairs
from .options import UNDESCRIBED

__all__ = [
    "STATE_KEYS",
    "STATE_VERSION",
    "check_options",
    "check_state",
    "lengths_digest",
    "per_run",
]

STATE_VERSION = 2
STATE_KEYS = ("version", "epoch", "position", "num_replicas", "lengths", "options", "plan")


def lengths_digest(lengths: NDArray[np.int64], loss_tokens: NDArray[np.int64] | None) -> str:
    h = hashlib.blake2b(lengths.tobytes(), digest_size=16)
    if is_pairs(lengths):  # not the 1-D lengths of the same bytes
        h.update(b"pairs")
    if loss_tokens is not None:
        h.update(b"loss_tokens" + loss_tokens.tobytes())
    return h.hexdigest()


def check_state(state: Any) -> tuple[int, int, int]:
    """The saved epoch, position and rank count, once the state's form is checked."""
    if not isinstance(state, Mapping):
        raise InputTypeError(
            f"state must be the dict that state_dict() returned, got {type(state).__name__}"
        )
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise InputError(f"not a dynbatch sampler state: missing keys {missing}")
    version = state["version"]
    if not _is_int(version):
        raise InputTypeError(
            f"state['version'] must be the integer {STATE_VERSION}, got "
            f"state['version']={version!r} ({type(version).__name__})"
        )
    if version != STATE_VERSION:
        raise InputError(
            f"sampler state version {version!r} is not {STATE_VERSION}: it was "
            "saved by another dynbatch release"
        )
    epoch = check_int("state['epoch']", state["epoch"])
    position = check_int("state['position']", state["position"])
    replicas = state["num_replicas"]
    if not _is_int(replicas) or replicas < 1:
        raise (InputError if _is_int(replicas) else InputTypeError)(
            f"state['num_replicas'] must be an integer >= 1, got "
            f"state['num_replicas']={replicas!r} ({type(replicas).__name__})"
        )
    check_replicas(replicas, "state['num_replicas']")  # NOTE [ the most ranks ]
    for key in ("lengths", "plan"):
        if not isinstance(state[key], str):
            raise InputTypeError(
                f"state['{key}'] must be a str (a digest), got state['{key}']="
                f"{state[key]!r} ({type(state[key]).__name__})"
            )
    return epoch, position, int(replicas)


#: Options that scale with a rank's share, so may differ on another number of ranks: one
#: card's budget (the rest is cut to fit it), the fixed batch's per-rank step, and the widest
#: dense row that budget holds (``like_fixed``'s ``pack_len``,
#: NOTE [ the default budget of packed rows ] in :mod:`dynbatch.plan.packs.attention`).
_PER_RANK = ("max_cost", "max_batch_size", "fixed_step_size", "pack_len")


def per_run(options: Any) -> Any:
    """Fingerprinted options without those that scale with the ranks
    (NOTE [ resume on another number of ranks ]): every other one must be the saved run's, as
    on the same ranks. A cost's own budgets (``"tokens"``' micro-batch share) scale too: its
    kinds are kept."""
    if not isinstance(options, Mapping):
        return options
    kept = {k: v for k, v in options.items() if k not in _PER_RANK}
    if isinstance(kept.get("cost"), str):
        kept["cost"] = re.sub(r"<=[^;]*", "", kept["cost"])
    return kept


def check_options(saved: Any, here: Mapping[str, Any]) -> None:
    """Refuse saved options other than ``here``, naming each that differs."""
    if not isinstance(saved, Mapping):
        raise InputTypeError(f"state['options'] must be a dict, got {saved!r}")
    if set(saved) != set(here):
        raise InputError(
            f"state['options'] must hold every option ({', '.join(sorted(here))}), got {saved!r}"
        )
    differ = [
        f"{k}: saved {_typed(saved[k], here[k])}, here {_typed(here[k], saved[k])}"
        for k in here
        if UNDESCRIBED not in (saved[k], here[k])
        and (saved[k] != here[k] or isinstance(saved[k], bool) != isinstance(here[k], bool))
    ]
    if differ:
        raise InputError(
            "this sampler state was saved with other options, so the plan differs: "
            + "; ".join(differ)
            + ". Build the sampler with the options of the saved run."
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _typed(value: Any, other: Any) -> str:
    """``repr(value)``, with its type when ``other``'s type is another (``1`` against ``'1'``)."""
    kinds = {type(value), type(other)}
    if len(kinds) == 1 or kinds <= {int, float} or type(None) in kinds:
        return repr(value)
    return f"{value!r} ({type(value).__name__})"
