import sys
sys.path.insert(0, "/work/wt-attack2/examples")
import sft_causal_lm as s
from corpus import load_examples
train, dev, _ = load_examples("data/data300.csv", "x", 0)
train = [(s.clean(r), l) for r, l in train]
for size in (5, 10, 20, 40, 60, 100):
    v = s.CharVocab.build(s.pair_texts(train), size)
    print(size, {a: v.encode(t) for a, t in s.ANSWERS.items()})
