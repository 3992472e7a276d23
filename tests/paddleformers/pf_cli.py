"""The real ``paddleformers-cli train`` on this CPU, for the plug-in's tests and benchmark.

NOTE [ paddleformers-cli on a CPU ]
    The CLI launches ``paddle.distributed.launch --gpus $CUDA_VISIBLE_DEVICES`` on a bare
    ``python``: with no card listed it passes an empty ``--gpus`` and stops, so
    ``CUDA_VISIBLE_DEVICES`` names one entry a rank (``0``, or ``0,1`` for two CPU ranks), and the
    Python running this file comes first on ``PATH``. The YAML keeps the CPU's float32 path
    (:data:`CPU_YAML`); the training log is ``$PADDLEFORMERS_DIST_LOG/workerlog.<rank>``. Gradient
    accumulation above one fails in the stock Trainer on a CPU (``paddle.device.synchronize``),
    so the fixed batch is ``per_device_train_batch_size`` alone. ``fine_tuning: full``: the
    default is LoRA.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

SRC = Path(__file__).parents[2] / "src"
PLUGIN = SRC / "dynbatch" / "integrations" / "paddleformers" / "cli_plugin.py"

#: What the SFT workflow needs on this CPU (NOTE [ paddleformers-cli on a CPU ]).
CPU_YAML: dict[str, Any] = {
    "_attn_implementation": "eager",
    "device": "cpu",
    "compute_type": "float32",
    "fp16_opt_level": "O1",
    "amp_master_grad": False,
    "sharding": "",
    "unified_checkpoint": False,
    "save_checkpoint_format": None,
    "load_checkpoint_format": None,
    "fine_tuning": "full",
}

_WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]


def make_folder(folder: Path, n_train: int = 64, n_eval: int = 16, seed: int = 0) -> Path:
    """A tiny Llama, a character tokenizer beside it and ``{"src", "tgt"}`` jsonl data, in
    ``folder`` (the run's working directory: the YAML's paths are relative to it)."""
    from paddleformers.transformers import LlamaConfig, LlamaForCausalLM
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz .,?"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizer(
        str(folder / "vocab.txt"),
        do_lower_case=True,
        tokenize_chinese_chars=False,
        eos_token="[SEP]",
        bos_token="[CLS]",
    )
    tokenizer.save_pretrained(str(folder / "model"))
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=64,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        use_cache=False,
        tie_word_embeddings=False,
        fuse_rms_norm=False,
        _attn_implementation="eager",
    )
    LlamaForCausalLM(config).save_pretrained(str(folder / "model"))
    rng = random.Random(seed)

    def example() -> dict[str, str]:
        def words(k: int) -> str:
            return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, k)))

        return {"src": words(8), "tgt": words(14)}

    for name, n in (("train", n_train), ("eval", n_eval)):
        rows = [json.dumps(example()) for _ in range(n)]
        (folder / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def config(out: str = "out", plugin: bool = True, **changes: Any) -> dict[str, Any]:
    """The run's YAML as a dict: the CPU keys, the data, a batch of 8, one epoch."""
    cfg: dict[str, Any] = {
        "model_name_or_path": "model",
        "stage": "SFT",
        "template": "default",
        "train_dataset_type": "erniekit",
        "train_dataset_path": "train.jsonl",
        "train_dataset_prob": "1.0",
        "eval_dataset_type": "erniekit",
        "eval_dataset_path": "eval.jsonl",
        "eval_dataset_prob": "1.0",
        "max_seq_len": 64,
        "do_train": True,
        "do_eval": True,
        "evaluation_strategy": "epoch",
        "num_train_epochs": 1,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "per_device_eval_batch_size": 8,
        "learning_rate": 1.0e-3,
        "logging_steps": 1,
        "save_steps": 1000,
        "output_dir": out,
        "overwrite_output_dir": True,
        "seed": 1,
        **CPU_YAML,
    }
    if plugin:
        cfg["custom_register_path"] = str(PLUGIN)
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not ...}


def environment(
    log: Path, ranks: int = 1, settings: Path | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The CLI's environment on this CPU (NOTE [ paddleformers-cli on a CPU ])."""
    env = dict(os.environ)
    env.pop("DYNBATCH_CONFIG", None)
    env.update(
        CUDA_VISIBLE_DEVICES=",".join(str(r) for r in range(ranks)),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=f"{SRC}{os.pathsep}{env.get('PYTHONPATH', '')}",
        PADDLEFORMERS_DIST_LOG=str(log),
        MASTER_PORT=str(random.Random().randint(20000, 40000)),
    )
    if settings is not None:
        env["DYNBATCH_CONFIG"] = str(settings)
    env.update(extra or {})
    return env


def start(folder: Path, cfg: dict[str, Any], name: str, **env: Any) -> tuple[Any, Path]:
    """Start ``paddleformers-cli train <name>.yaml`` in ``folder``; its process and log dir."""
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    log = folder / f"log-{name}"
    cli = Path(sys.executable).parent / "paddleformers-cli"
    process = subprocess.Popen(
        [str(cli), "train", f"{name}.yaml"],
        cwd=folder,
        env=environment(log, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a kill reaches the launcher's workers too
    )
    return process, log


def train(folder: Path, cfg: dict[str, Any], name: str, **env: Any) -> tuple[int, str]:
    """Run the CLI to its end: its exit code and rank 0's training log."""
    process, log = start(folder, cfg, name, **env)
    code = process.wait(timeout=900)
    return code, worker_log(log)


def worker_log(log: Path, rank: int = 0) -> str:
    path = log / f"workerlog.{rank}"
    return path.read_text(errors="replace") if path.exists() else ""


def kill(process: Any) -> None:
    """SIGKILL the launch and every process it started (its session)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_for(path: Path, process: Any, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.05)


def logged(log: str, key: str) -> list[float]:
    """Every value of ``key`` in the Trainer's log lines, in order."""
    return [float(v) for v in re.findall(rf"(?<![\w]){key}: ([-\d.e+]+)", log)]
