"""The library's error types for bad input: catch these to handle dynbatch's complaints.

Every input error is an :class:`InputError` (a ``ValueError``), or an
:class:`InputTypeError` (also a ``TypeError``) when the value has the wrong
type, so a program can catch dynbatch's own complaints about its input and
let real bugs keep their tracebacks (the ``dynbatch`` CLI does exactly that).
Each message names the argument, echoes the value and says what would be valid.

>>> import dynbatch
>>> try:
...     dynbatch.plan_batches([3, 5], max_cost=0)
... except dynbatch.InputError as exc:
...     print(type(exc).__module__, "|", exc)
dynbatch.errors | max_cost must be a positive finite number, got max_cost=0
"""

from __future__ import annotations

__all__ = ["InputError", "InputTypeError"]


class InputError(ValueError):
    """A bad argument or input: the message names it, echoes it and says what is valid."""


class InputTypeError(InputError, TypeError):
    """A bad argument of the wrong type (also a ``TypeError``)."""
