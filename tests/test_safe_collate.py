"""safe_collate: a collate error reaches the loop by name through a real paddle DataLoader,
with and without workers (NOTE [ a collate error in paddle's DataLoader ]). Each run is a
process of its own, killed if it hangs: paddle's hang holds the main thread in C++."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from deadline import run_within

import dynbatch
from dynbatch.paddle.safe_collate import FAILED, CollateError, CollateFailure, raise_failure

LOOP = """
import atexit
import threading

import numpy as np
import paddle
import dynbatch


class NeedsArgs(Exception):  # unpickles as NeedsArgs(message): a TypeError
    def __init__(self, a, b):
        super().__init__(f"needs {{a}} and {{b}}")


def needs_args(samples):
    raise NeedsArgs(1, 2)


data = [{{"input_ids": [i + 1] * 3}} for i in range(8)]
data[5] = {{"input_ids": [6, 6], "text": "a review"}}


def report(collate):
    loader = paddle.io.DataLoader(data, batch_size=2, collate_fn=collate, num_workers={workers})
    taken = 0
    try:
        for batch in collate.batches(loader):
            assert batch["input_ids"].shape[1] <= 8  # rows as wide as the fullest
            taken += 1
    except Exception as exc:
        cause = exc.__cause__
        print("RAISED", type(exc).__name__, "|", str(exc).splitlines()[0])
        print("CAUSE", type(cause).__name__, "|", str(cause).splitlines()[0])
    print("TAKEN", taken, flush=True)


report(dynbatch.safe_collate(dynbatch.PackCollator(8)))
report(dynbatch.safe_collate(needs_args))
atexit._run_exitfuncs()  # what the interpreter's exit runs: every reader stopped
print("THREADS", [t.name for t in threading.enumerate() if "_thread_loop" in t.name], flush=True)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_collate_error_reaches_a_plain_loop_by_name(workers: int) -> None:
    """Without the wrapper paddle's loader hangs (num_workers=0) or raises a bare SystemError
    (workers); with it, the batches before arrive and then the collator's own error."""
    done = run_within(240, LOOP.format(workers=workers))
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    # the exit stops every reader a collate error left (a daemon thread alive at exit can
    # abort the interpreter): NOTE [ a loader after a collate error ]; with workers paddle's
    # own shutdown lets its thread end in its own time, even after a pass that ended
    threads, out = out.splitlines()[-1], "".join(f"{x}\n" for x in out.splitlines()[:-1])
    assert threads == "THREADS []" or workers, threads
    assert out.endswith("TAKEN 0\n"), out + done.stderr[-3000:]
    packed, needs = out.split("TAKEN 2\n")  # the batches before the failing one arrive
    assert "RAISED InputError | samples[1] has the field 'text', which the packed rows" in packed
    assert "CAUSE CollateError | the collate_fn PackCollator(pack_len=8, " in packed, out
    assert re.search(r"\(on 2 samples\) raised the InputError below", packed), out
    if workers == 0:  # the exception itself, in this process
        assert "RAISED NeedsArgs | needs 1 and 2" in needs, out
        assert "CAUSE CollateError | the collate_fn __main__.needs_args (on 2" in needs, out
    else:  # it cannot be pickled back: named by its type and message
        assert (
            "RAISED CollateError | the collate_fn __main__.needs_args (on 2 samples) raised "
            "NeedsArgs: needs 1 and 2 (the error itself could not be sent" in needs
        ), out + done.stderr[-3000:]
    assert "SystemError" not in out + done.stderr


def test_the_failure_batch_holds_an_array_and_pickles() -> None:
    """A batch of no array reads as the loader's end; an exception that cannot be unpickled
    travels as its name and message."""

    class Local(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}{b}")

    def broken(samples: object) -> object:
        raise Local(1, 2)

    collate = dynbatch.safe_collate(broken)
    batch = collate([1, 2])
    arrays = [v for v in batch.values() if type(v) is np.ndarray]
    assert arrays and type(batch[FAILED]) is CollateFailure
    with pytest.raises(Local, match="12"):  # asked what it is, outside paddle's loader
        isinstance(batch[FAILED], str)  # as paddle's loader asks, restoring the batch
    sent = pickle.loads(pickle.dumps(batch[FAILED]))
    assert sent.error is None and (sent.kind, sent.message) == ("Local", "12")
    with pytest.raises(CollateError, match=r"raised Local: 12 \(the error itself could not"):
        raise_failure({FAILED: sent})
    with pytest.raises(Local, match="12") as info:
        raise_failure(batch)
    assert "<locals>.broken (on 2 samples)" in str(info.value.__cause__), "the collator named"


def test_a_good_batch_passes_unchanged_and_wrapping_twice_is_once() -> None:
    collate = dynbatch.safe_collate(dynbatch.Pad())
    batch = collate([[1, 2], [3]])
    assert raise_failure(batch) is batch and batch.tolist() == [[1, 2], [3, 0]]
    assert dynbatch.safe_collate(collate) is collate
    assert len(collate.batches([batch, batch])) == 2
    with pytest.raises(dynbatch.InputTypeError, match=r"collate_fn must be callable.*got"):
        dynbatch.safe_collate(None)  # type: ignore[arg-type]


SKIP = """
import atexit
import threading

import numpy as np
import paddle
import dynbatch

data = [[i + 1] * 3 for i in range(16)]
data[5] = "a review"  # the third batch of two fails
loader = paddle.io.DataLoader(data, batch_size=2, collate_fn=dynbatch.Pad(), num_workers={workers})
it = iter(loader)
got = []
while True:
    try:
        got += sorted(int(x) for x in np.asarray(next(it))[:, 0])
    except StopIteration:
        break
    except dynbatch.InputError as exc:
        print("SKIPPED", type(exc).__name__, flush=True)
print("GOT", got, flush=True)
atexit._run_exitfuncs()  # what the interpreter's exit runs: every reader stopped
print("THREADS", [t.name for t in threading.enumerate() if "_thread_loop" in t.name], flush=True)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_that_skips_a_bad_batch_gets_every_other_batch_and_exits_cleanly(
    workers: int,
) -> None:
    """Catching a collator's error and taking the next batch goes on to the epoch's end: no
    batch lost (the loader is not stopped under the loop), no hang at the end (with workers
    the failed batch counts as delivered), and the exit stops the reader thread."""
    done = run_within(120, SKIP.format(workers=workers))
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "SKIPPED InputTypeError" in out, out
    expected = [i + 1 for i in range(16) if i not in (4, 5)]
    assert f"GOT {expected}" in out, out
    assert "THREADS []" in out or workers, out  # with workers: see the test above
