"""A small terminal progress bar: rate, and any figures you pass (padding efficiency...).

It redraws one line at most every ``interval`` seconds on a terminal; on a
pipe or log file it writes a plain line every ``log_every`` seconds instead,
so CI logs stay readable.

>>> import io
>>> out = io.StringIO()
>>> bar = Progress(total=4, desc="read", unit="lines", stream=out, interval=0)
>>> bar.update(4)
>>> bar.close()
>>> "read 4/4 lines" in out.getvalue()
True
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """Counts work and shows ``desc done/total unit  rate unit/s  key=value ...``.

    Args:
        total: expected count, or None when unknown.
        desc: what is being counted.
        unit: the unit of the count (``samples``, ``lines``).
        stream: where to draw (default stderr).
        interval: seconds between redraws on a terminal.
        log_every: seconds between lines when ``stream`` is not a terminal.
    """

    def __init__(
        self,
        total: int | None = None,
        *,
        desc: str = "",
        unit: str = "it",
        stream: TextIO | None = None,
        interval: float = 0.2,
        log_every: float = 30.0,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = interval if self.tty else log_every
        self.count = 0
        self.fields: dict[str, Any] = {}
        self.start = self._last = time.perf_counter()
        self._drawn = False

    def update(self, n: int = 1, **fields: Any) -> None:
        """Add ``n`` to the count; ``fields`` (e.g. ``padding=0.97``) are shown after the rate."""
        self.count += n
        self.fields.update(fields)
        now = time.perf_counter()
        if now - self._last >= self.every:
            self._last = now
            self._draw(final=False)

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        done = f"{self.count}/{self.total}" if self.total is not None else f"{self.count}"
        parts = [
            f"{self.desc} {done} {self.unit}".strip(),
            f"{self.count / elapsed:,.1f} {self.unit}/s",
        ]
        for key, value in self.fields.items():
            parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
        if self.total:
            filled = int(20 * min(self.count / self.total, 1.0))
            parts.insert(0, "[" + "#" * filled + "." * (20 - filled) + "]")
        return "  ".join(parts)

    def _draw(self, final: bool) -> None:
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + self.line() + end)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Draw the final state once."""
        self._draw(final=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
