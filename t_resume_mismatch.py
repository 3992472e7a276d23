import sys, os, tempfile, glob, json
sys.path.insert(0, "/work/main/tests/scripts"); sys.path.insert(0, "/tmp/attack")
import numpy as np, paddle
from t_resume import make
from dynbatch import MemoryCost
G = paddle.utils.unique_name.guard
cfg = dict(seed=3, n=40, order="shuffle", cost="mem", mbs=None, gas=2, acc="samples", target=None, epochs=2,
           equal_epochs=False, drop_last=False, save_steps=2)
out = tempfile.mkdtemp()
with G():
    tr, rec = make(cfg, out); tr.train()
ck = os.path.join(out, "checkpoint-2")
print("state file keys", list(json.load(open(os.path.join(ck, "dynbatch_trainer.json")))))
def attempt(name, cfg_over={}, **over):
    c = dict(cfg); c.update(cfg_over)
    try:
        with G():
            t2, r2 = make(c, tempfile.mkdtemp(), **over); t2.train(resume_from_checkpoint=ck)
        print(f"{name:34s} RESUMED: steps={t2.state.global_step} windows={len(r2.windows)}")
    except Exception as e:
        print(f"{name:34s} {type(e).__name__}: {str(e)[:260]!r}")
attempt("same options (control)")
attempt("other MemoryCost", plan={"cost": MemoryCost(c=1.0, a=0.01, b=0.0006, floor=1.5)})
attempt("other seed", {"seed": 4})
attempt("other order", {"order": "bucket"})
attempt("other max_batch_size", {"mbs": 5})
attempt("other accumulate", {"acc": "tokens"})
attempt("other gas", {"gas": 3})
attempt("accumulate_target instead", {"gas": 1, "target": 10.0})
attempt("drop_last", {"drop_last": True})
attempt("equal_epochs", {"equal_epochs": True})
attempt("other epochs (3)", {"epochs": 3})
attempt("other epochs (1)", {"epochs": 1})
attempt("max_steps=3 instead", args={"max_steps": 3})
attempt("max_steps=1 (< checkpoint)", args={"max_steps": 1})
ds = None
from t_harness import IdxReviews
l = IdxReviews(40, seed=3).lengths.copy(); l[0] += 1
attempt("other lengths", lengths=l)
attempt("other dataset size", {"n": 41})
# tampered state file
import shutil
ck2 = ck + "-tamper"; shutil.copytree(ck, ck2)
p = os.path.join(ck2, "dynbatch_trainer.json"); st = json.load(open(p))
st["global_step"] = 3; json.dump(st, open(p, "w"))
def attempt_ck(name, path):
    try:
        with G():
            t2, r2 = make(cfg, tempfile.mkdtemp()); t2.train(resume_from_checkpoint=path)
        print(f"{name:34s} RESUMED: steps={t2.state.global_step}")
    except Exception as e:
        print(f"{name:34s} {type(e).__name__}: {str(e)[:260]!r}")
attempt_ck("tampered global_step", ck2)
open(p, "w").write("{garbage"); attempt_ck("corrupt state json", ck2)
json.dump({"version": 1}, open(p, "w")); attempt_ck("state missing keys", ck2)
json.dump([1, 2], open(p, "w")); attempt_ck("state is a list", ck2)
st["version"] = 2; json.dump(st, open(p, "w")); attempt_ck("state version 2", ck2)
ck3 = ck + "-noweights"; shutil.copytree(ck, ck3)
for f in os.listdir(ck3):
    if f != "dynbatch_trainer.json": os.remove(os.path.join(ck3, f))
attempt_ck("only dynbatch_trainer.json", ck3)
