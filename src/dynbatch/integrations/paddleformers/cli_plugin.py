"""The file a ``paddleformers-cli train`` YAML names to train on dynbatch's batches.

::

    custom_register_path: <this file>   # python -m dynbatch.integrations.paddleformers.cli_plugin

PaddleFormers executes it while it parses the YAML, in every training process; it puts dynbatch
into the SFT workflow (:func:`~.sft_workflow.install`;
NOTE [ the seams of PaddleFormers' SFT workflow ] there). dynbatch's own settings come from
the YAML or JSON file that ``$DYNBATCH_CONFIG`` names (:func:`~.sft_workflow.read_settings`).
Run as a module, it prints its path, the line's value.
"""

from __future__ import annotations

import sys

from dynbatch.integrations.paddleformers.sft_workflow import install

__all__ = ["PATH", "main"]

#: This file: the value of ``custom_register_path``.
PATH = __file__


def main(argv: list[str] | None = None) -> int:
    """Print :data:`PATH` (``--path``, the default, or nothing)."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--path"]):
        print(
            f"usage: python -m {__spec__.name if __spec__ else 'cli_plugin'} [--path]",
            file=sys.stderr,
        )
        return 2
    print(PATH)
    return 0


install()

if __name__ == "__main__":
    sys.exit(main())
