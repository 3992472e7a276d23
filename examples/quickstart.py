"""Quick start: a plain paddle loop on dynamic batches told the fixed batch of 32 (CPU, offline).

python examples/quickstart.py
"""

import numpy as np
import paddle
import paddle.nn.functional as F

import dynbatch

# stand-ins for yours: reviews of token ids, 5 to 127 long, whose label is which of two small
# sets of "sentiment" words (ids 1-99 or 100-199) shows up more often; and a small model
rng = np.random.default_rng(0)


def corpus(size):
    lengths = rng.integers(5, 128, size=size)
    labels = rng.integers(0, 2, size=size)
    reviews = []
    for n, label in zip(lengths, labels, strict=True):
        ids = rng.integers(200, 1000, n)
        cue = rng.random(n) < 0.1  # one word in ten carries sentiment
        side = np.where(rng.random(cue.sum()) < 0.8, label, 1 - label)  # mostly the label's
        ids[cue] = rng.integers(1, 100, cue.sum()) + 100 * side
        reviews.append((ids, np.int64(label)))
    return reviews, lengths


train_ds, lengths = corpus(2000)
dev_ds, _ = corpus(500)


class Model(paddle.nn.Layer):
    def __init__(self, vocab_size=1000, hidden=32):
        super().__init__()
        self.emb = paddle.nn.Embedding(vocab_size, hidden)
        self.out = paddle.nn.Linear(hidden, 2)

    def forward(self, ids):  # the mean of the word vectors, padding (id 0) left out
        mask = (ids != 0).astype("float32").unsqueeze(-1)
        return self.out((self.emb(ids) * mask).sum(axis=1) / mask.sum(axis=1))


paddle.seed(0)
model = Model()
epochs = 3

# was: paddle.io.BatchSampler(train_ds, batch_size=32, shuffle=True)
sampler = dynbatch.DynamicBatchSampler(train_ds, lengths=lengths, batch_size=32)
collate = dynbatch.Tuple(dynbatch.Pad(pad_val=0), dynbatch.Stack())
loader = paddle.io.DataLoader(train_ds, batch_sampler=sampler, collate_fn=collate)

total_steps = sampler.steps_for_epochs(range(epochs))  # exact, known before the optimizer
schedule = paddle.optimizer.lr.PolynomialDecay(3e-3, decay_steps=total_steps)
optimizer = paddle.optimizer.AdamW(schedule, parameters=model.parameters())
acc = dynbatch.GradientAccumulator(model, optimizer, sampler=sampler, lr_scheduler=schedule)

dev_ids, dev_labels = (paddle.to_tensor(a) for a in collate(dev_ds))
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    loss_sum = 0.0
    for ids, labels in loader:
        with acc.accumulate():  # DataParallel.no_sync() unless this micro-batch ends an update
            losses = F.cross_entropy(model(ids), labels, reduction="none")
            acc.backward(losses.sum(), count=labels.shape[0])  # steps where the update ends
        loss_sum += float(losses.sum())
    with paddle.no_grad():
        right = float((model(dev_ids).argmax(axis=-1) == dev_labels).astype("float32").mean())
    print(f"epoch {epoch}: train loss {loss_sum / len(train_ds):.3f}, dev accuracy {right:.3f}")
print(acc.optimizer_steps, "updates, as planned:", total_steps)  # ~2000 / 32 an epoch
