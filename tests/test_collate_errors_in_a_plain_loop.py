"""Every dynbatch collator, given to a plain ``paddle.io.DataLoader`` as the docs write it
(``for batch in loader``, no wrapper), gets its error to the loop by name: paddle's loader would
hang (num_workers=0) or raise a bare SystemError (workers)
(NOTE [ a collator safe by construction ] in :mod:`dynbatch.paddle.safe_collate`). Each run is a
process of its own, killed if it hangs: paddle's hang holds the main thread in C++."""

from __future__ import annotations

import pytest
from deadline import run_within

import dynbatch

LOOP = """
import atexit
import threading

import numpy as np
import paddle
import dynbatch
from dynbatch import Dict, Pad, PackCollator, Seq2SeqCollator, Stack, Tuple

lengths = np.array([3, 3, 3, 3, 3, 2, 3, 3])
good = [{{"input_ids": [i + 1] * int(n), "target": [7, 8], "label": i % 2}}
        for i, n in enumerate(lengths)]
sampler = dynbatch.DynamicBatchSampler(good, lengths=lengths, max_cost=6, cost="linear",
                                      order="none")
assert [list(b) for b in sampler][:3] == [[0, 1], [2, 3], [4, 5]], list(sampler)
for name, collate, bad in [
    ("PackCollator", PackCollator(8), {{"input_ids": [6, 6], "text": "a review"}}),
    ("PackCollator-label", PackCollator(8, sample_label="label"), {{"input_ids": [6, 6]}}),
    ("Pad", Pad(), "a review"),
    ("Stack", Stack(), [6, 6]),
    ("Tuple", Tuple(Pad(), Stack()), ([6, 6], "one")),
    ("Dict", Dict({{"input_ids": Pad(), "label": Stack()}}), {{"input_ids": [6, 6]}}),
    ("Seq2SeqCollator", Seq2SeqCollator(source="input_ids"), {{"input_ids": [6, 6], "target": []}}),
]:
    data = list(good)
    if name in ("Pad", "Stack"):
        data = [s["input_ids"] for s in good]
    if name == "PackCollator":
        data = [{{"input_ids": s["input_ids"]}} for s in good]
    if name == "PackCollator-label":
        data = [{{"input_ids": s["input_ids"], "label": s["label"]}} for s in good]
    if name == "Tuple":
        data = [(s["input_ids"], s["label"]) for s in good]
    data[5] = bad
    loader = paddle.io.DataLoader(data, batch_sampler=sampler, collate_fn=collate,
                                  num_workers={workers})
    taken = 0
    try:
        for batch in loader:
            taken += 1
    except Exception as exc:
        cause = exc.__cause__
        print(name, "RAISED", type(exc).__name__, "|", str(exc).splitlines()[0])
        print(name, "CAUSE", type(cause).__name__, "|", str(cause).splitlines()[0])
    print(name, "TAKEN", taken, flush=True)
atexit._run_exitfuncs()  # what the interpreter's exit runs: every reader stopped
print("THREADS", [t.name for t in threading.enumerate() if "_thread_loop" in t.name], flush=True)
"""

NAMED = {
    "PackCollator": "samples[1] has the field 'text', which the packed rows would drop",
    "PackCollator-label": "samples[1] has no 'label': sample_label='label'",
    "Pad": "Pad: data[1]='a review' is text",
    "Stack": "Stack: sample 1 has shape (2,), sample 0 has shape (3,)",
    "Tuple": "Stack: data[1]='one' is text",
    "Dict": "Dict: sample 1 has no field 'label'",
    "Seq2SeqCollator": "Seq2SeqCollator: sample 1's target=[] must be a non-empty",
}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dynbatch_collators_error_reaches_a_plain_loop_by_name(workers: int) -> None:
    """The batches before the bad one arrive (samples 0..1, then 2..3: 5 is in the third
    batch), then the collator's own error, its type and message, the collator named in its
    cause; nothing hangs and no bare SystemError."""
    done = run_within(300, LOOP.format(workers=workers))
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    for name, message in NAMED.items():
        lines = [line for line in out.splitlines() if line.split(" ", 1)[0] == name]
        assert len(lines) == 3, (name, out + done.stderr[-3000:])
        raised, cause, taken = lines
        assert raised.startswith(f"{name} RAISED Input"), raised
        assert message in raised, (raised, message)
        assert cause.startswith(f"{name} CAUSE CollateError | the collate_fn "), cause
        assert taken == f"{name} TAKEN 2", taken
    assert "SystemError" not in out + done.stderr
    # NOTE [ a loader after a collate error ]; with workers paddle's thread ends in its own time
    assert out.endswith("THREADS []\n") or workers, out


def test_called_outside_a_loader_a_collator_raises_as_any_function_does() -> None:
    """Only paddle's loader gets the error as a batch; a direct call raises it."""
    with pytest.raises(dynbatch.InputTypeError, match=r"Pad: data\[0\]='a' is text"):
        dynbatch.Pad()(["a"])
    with pytest.raises(dynbatch.InputTypeError, match=r"Stack: data\[1\]='one' is text"):
        dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack())([([1], 0), ([2], "one")])


INTERRUPTED = """
import paddle
import dynbatch


class Cancelled(BaseException):  # not an Exception: a library's cancellation, say
    pass


class Lazy:  # a sample whose ids raise it when read
    def __len__(self):
        raise Cancelled("the run was cancelled")

    __iter__ = __array__ = __len__


data = [[1, 2, 3]] * 3 + [Lazy()] + [[1, 2, 3]] * 4
loader = paddle.io.DataLoader(data, batch_size=2, collate_fn=dynbatch.Pad(), num_workers=0)
taken = 0
try:
    for batch in loader:
        taken += 1
except BaseException as exc:
    print("RAISED", type(exc).__name__, "|", exc, "| TAKEN", taken, flush=True)
"""


def test_a_collators_base_exception_reaches_a_plain_loop_without_workers() -> None:
    """An exception that is not an ``Exception`` (a cancellation, a ``KeyboardInterrupt``
    raised by the data) ended paddle's collating thread and the loop waited forever."""
    done = run_within(300, INTERRUPTED)
    assert "RAISED Cancelled | the run was cancelled | TAKEN 1" in done.stdout, (
        done.stdout + done.stderr[-3000:]
    )
