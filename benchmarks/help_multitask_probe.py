"""Probe (not shipped in ``anb adapt``): an architecture representation learned across the known
devices, on HELP's protocol (issue 47, "a transfer that knows architectures").

    .venv/bin/python benchmarks/help_multitask_probe.py SPACE {valid,lomo,family_valid}
        [--draws 5]

A multi-task network (the space's per-(slot, unit) counts -> 128 -> 64 ReLU units -> one linear
head per known device) is fitted on every known device's full table (standardised log
latency; Adam, :data:`EPOCHS` epochs); its 64 hidden units are the learned representation.
Printed per unseen device (n = 20, mean Spearman over the draws):

- ``shipped``: :class:`~anb.surrogates.adapt.model.AdaptedModel` as ``anb adapt`` fits it;
- ``blocks``: the ridge of :mod:`anb.surrogates.adapt.embed` alone (its four blocks, each with
  its own leave-one-out shrinkage);
- ``blocks+mlp``: the same with the hidden units as a fifth block;
- ``mlp``: the ridge on the hidden units alone;
- ``nearest``: the head of the known device whose output ranks the ``n`` rows best;
- ``finetune``: NASFLAT's recipe on this network: the nearest head and the whole network
  fitted further on the ``n`` rows (:data:`FINETUNE_STEPS` full-batch Adam steps, an L2 pull
  of weight :data:`FINETUNE_PULL` towards the pre-trained weights);
- ``avg``: the mean of ``shipped`` and ``finetune`` standardised on the ``n`` rows.

For NAS-Bench-201 the counts are the one-hot of the six edges, the whole cell (fixed
topology), so a graph network sees nothing this network does not. Results and what they
decided: docs/decisions/help-transfer.md.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import help_transfer as H
import numpy as np
import torch
from scipy.stats import spearmanr

from anb.resources import HELP_DIR
from anb.searchspace import get_space
from anb.surrogates import help_tables as ht
from anb.surrogates.adapt import embed
from anb.surrogates.adapt.model import AdaptedModel, op_components

#: Width of the network's two hidden layers (the second is the representation).
HIDDEN = (128, 64)
#: Pre-training on the known devices' tables: epochs, batch size, learning rate.
EPOCHS, BATCH, LEARNING_RATE = 60, 256, 2e-3
#: Fine-tuning on the new device's rows (full batch): steps, learning rate, pull towards the
#: pre-trained weights. Also tried on ``valid``: 100 steps, pull 1e-3 (mean 0.948 vs 0.955).
FINETUNE_STEPS, FINETUNE_RATE, FINETUNE_PULL = 30, 1e-3, 1e-2
#: What is printed per device, in order.
COLUMNS = ("shipped", "blocks", "blocks+mlp", "mlp", "nearest", "finetune", "avg")


class MultiTask(torch.nn.Module):
    """The shared body and one linear head per known device."""

    def __init__(self, inputs: int, devices: int):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(inputs, HIDDEN[0]), torch.nn.ReLU(),
                                        torch.nn.Linear(*HIDDEN), torch.nn.ReLU())
        self.head = torch.nn.Linear(HIDDEN[1], devices)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def pretrain(x: np.ndarray, y: np.ndarray, seed: int = 0) -> MultiTask:
    """Fit the network on every known device's standardised log latency ``y``."""
    torch.manual_seed(seed)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    net = MultiTask(x.shape[1], y.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE, weight_decay=1e-5)
    for _ in range(EPOCHS):
        order = torch.randperm(len(xt))
        for start in range(0, len(xt), BATCH):
            batch = order[start:start + BATCH]
            opt.zero_grad()
            ((net(xt[batch]) - yt[batch]) ** 2).mean().backward()
            opt.step()
    return net


def finetune(net: MultiTask, x: np.ndarray, rows: np.ndarray, y: np.ndarray,
             nearest: int) -> np.ndarray:
    """NASFLAT's recipe: the nearest device's head and the body fitted further on ``rows``;
    the predicted (standardised) log latency of every row of ``x``."""
    body = copy.deepcopy(net.body)
    head = torch.nn.Linear(HIDDEN[1], 1)
    with torch.no_grad():
        head.weight.copy_(net.head.weight[nearest:nearest + 1])
        head.bias.copy_(net.head.bias[nearest:nearest + 1])
    params = list(body.parameters()) + list(head.parameters())
    start = [p.detach().clone() for p in params]
    xt = torch.tensor(x, dtype=torch.float32)
    target = torch.tensor((y[rows] - y[rows].mean()) / y[rows].std(), dtype=torch.float32)
    opt = torch.optim.Adam(params, lr=FINETUNE_RATE)
    for _ in range(FINETUNE_STEPS):
        opt.zero_grad()
        fit = ((head(body(xt[rows]))[:, 0] - target) ** 2).mean()
        pull = sum(((p - s) ** 2).sum() for p, s in zip(params, start, strict=True))
        (fit + FINETUNE_PULL * pull).backward()
        opt.step()
    with torch.no_grad():
        return head(body(xt)).numpy()[:, 0]


def block_ridge(blocks: list[np.ndarray], y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The embedding ridge's fit (standardised blocks, each block's shrinkage by
    :func:`~anb.surrogates.adapt.embed.choose_shrinkage`) on ``rows``; its prediction for every
    row."""
    z = []
    for block in blocks:
        scale = block[rows].std(0)
        z.append((block - block[rows].mean(0)) / np.where(scale > 1e-9, scale, np.inf))
    grams = [b[rows] @ b[rows].T for b in z]
    lambdas = embed.choose_shrinkage(grams, y[rows])
    dual = embed._loo(grams, lambdas, y[rows])[2]
    return sum(b @ (b[rows].T @ dual) / lam for b, lam in zip(z, lambdas, strict=True)) \
        + embed._INTERCEPT_VAR * dual.sum()


def _rho(pred: np.ndarray, y: np.ndarray) -> float:
    return float(spearmanr(pred, y)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("space", choices=sorted(ht.PROTOCOLS))
    parser.add_argument("on", choices=("valid", "lomo", "family_valid"))
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    table = ht.read_table(HELP_DIR, args.space)
    space, proto = get_space(args.space), ht.protocol(args.space)
    choices = ht.choices(table, args.space)
    ops = op_components(choices, space)
    features, block = embed.arch_features(space, choices)
    counts = features[:, block == 3]
    means = []
    print("| device | " + " | ".join(COLUMNS) + " |\n" + "|---" * (len(COLUMNS) + 1) + "|")
    for known, unseen in proto.splits(args.on):
        base = H.fit_known(table, args.space, known)
        K = base.log_costs(choices)
        measured = np.log(table[list(known)].to_numpy(np.float64))
        net = pretrain(counts, (measured - measured.mean(0)) / measured.std(0))
        with torch.no_grad():
            xt = torch.tensor(counts, dtype=torch.float32)
            hidden, heads = net.body(xt).numpy(), net(xt).numpy()
        blocks = [K] + [features[:, block == b] for b in (1, 2, 3) if np.any(block == b)]
        for device in unseen:
            latency = table[device].to_numpy(np.float64)
            y, q = np.log(latency), ht.query_rows(proto, latency)
            scores = []
            for draw in range(args.draws):
                rows = ht.measured_rows(proto, latency, 20, np.random.default_rng(draw))
                model = AdaptedModel.fit(ht.target(device), base.targets, K[rows], ops[rows],
                                         latency[rows], known_source=base.source,
                                         choices=choices[rows], space=space)
                both = np.concatenate([rows, q])
                shipped = np.zeros(len(y))
                shipped[both] = model.predict_log_cost(
                    K[both], ops[both], **model.design_inputs(choices[both], space))[0]
                nearest = int(np.argmax([_rho(heads[rows, d], y[rows])
                                         for d in range(heads.shape[1])]))
                tuned = finetune(net, counts, rows, y, nearest)

                def unit(v: np.ndarray, r: np.ndarray = rows) -> np.ndarray:
                    return (v - v[r].mean()) / v[r].std()

                preds = (shipped, block_ridge(blocks, y, rows),
                         block_ridge(blocks + [hidden], y, rows), block_ridge([hidden], y, rows),
                         heads[:, nearest], tuned, unit(shipped) + unit(tuned))
                scores.append([_rho(p[q], y[q]) for p in preds])
            means.append(np.mean(scores, 0))
            print(f"| {device} | " + " | ".join(f"{v:.3f}" for v in means[-1]) + " |",
                  flush=True)
    print("| mean | " + " | ".join(f"{v:.3f}" for v in np.mean(means, 0)) + " |")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
