"""Run every benchmark in turn and print their tables (the README quotes them).

    python benchmarks/run_all.py

The example's throughput and accuracy table is not in here (it trains for ~20 minutes on
CPU); it comes from:

    python examples/bert_chnsenticorp.py --data-file ../shared/data/chnsenticorp_htl_all.csv \\
        --vocab ../shared/data/bert-base-chinese-vocab.txt --model tiny --epochs 2
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent

if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    for name in ("padding", "planning_speed", "load_balance"):
        print(f"\n## {name}\n", flush=True)
        sys.argv = [str(HERE / f"{name}.py")]
        runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
