"""The public names, and that the core works without paddle."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import dynbatch


def test_all_names_resolve() -> None:
    for name in dynbatch.__all__:
        assert getattr(dynbatch, name) is not None, name
    assert sorted(dynbatch.__all__) == dynbatch.__all__ == sorted(set(dynbatch.__all__))


def test_core_imports_and_plans_without_paddle() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["paddle"] = None  # as if not installed
        import dynbatch
        plan = dynbatch.plan_batches([5, 3, 9, 2], 200, cost="linear")
        assert sorted(i for b in plan for i in b) == [0, 1, 2, 3]
        assert "paddle" not in [m for m in sys.modules if sys.modules[m] is not None]
        try:
            dynbatch.DynamicBatchSampler
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "dynbatch[cpu]"' in out.stdout
