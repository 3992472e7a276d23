"""Run every benchmark in turn and print their tables (docs/benchmarks.md quotes them).

    python benchmarks/run_all.py

The examples' throughput and accuracy tables are not in here (they train for many minutes on
CPU); docs/benchmarks.md gives their commands.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent

if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    for name in (
        "padding",
        "planning_speed",
        "load_balance",
        "rank_balance",
        "wordpiece",
        "memory",
        "streaming",
        "pairs",
    ):
        print(f"\n## {name}\n", flush=True)
        sys.argv = [str(HERE / f"{name}.py")]
        runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
