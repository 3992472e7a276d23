"""Streams: sources, their block plans and their state; numpy only, never paddle.

A stream is planned block by block from a bounded buffer of a source. The one paddle
adapter of a stream, ``DynamicBatchIterable``, lives in :mod:`dynbatch.paddle.stream_loader`.
"""

from __future__ import annotations

__all__: list[str] = []
