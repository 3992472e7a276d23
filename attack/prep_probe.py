import sys, tempfile, pathlib, traceback
sys.path.insert(0, "/work/wt-attack2/examples")
import sft_causal_lm as s
from corpus import CorpusError
for f in sorted(pathlib.Path("data").iterdir()):
    with tempfile.TemporaryDirectory() as t:
        args = s.parse_args(["--data-file", str(f), "--max-len", "32", "--max-train-samples", "100", "--output-dir", t])
        try:
            meta = s.prepare(args, pathlib.Path(t))
            print(f"{f.name:22s} OK train={meta['train_pairs']} dev={meta['dev_pairs']} vocab={meta['vocab_size']} cut={meta['reviews_cut']:.2f} unk={meta['dev_unknown_share']:.3f}")
        except (s.UsageError, CorpusError) as e:
            print(f"{f.name:22s} ERR2 {e}")
        except Exception as e:
            print(f"{f.name:22s} TRACEBACK {type(e).__name__}: {e}")
