"""Where the training data lie, so that predictions outside it say so.

Two signals per architecture: the distance to the nearest training architecture in the
ordinal feature space (each choice scaled to 0..1), relative to the 99th percentile of the
training architectures' own nearest-neighbour distances (``ood_distance``: above 1 is farther
out than 99 % of the data), and how far its analytic costs (MACs, params) lie outside the
training range, in log units (``ood_cost``). ``ood`` flags either. The predictive std grows with
both (:meth:`Support.inflate`): the spread scales with the relative distance, and a cost excess
adds the target's own trend over that excess (``|d target / d log MACs| * excess``), the change
the model has not seen.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from anb.searchspace.base import Space
from anb.searchspace.space import ANB_SPACE

COSTS = ("macs", "params")
QUANTILE = 0.99


def _positions(choices: np.ndarray, space: Space) -> np.ndarray:
    pos = space.positions(choices).astype(np.float64)
    radices = space.radices().astype(np.float64)
    return (pos / np.maximum(radices - 1, 1)).astype(np.float32)


def log_costs(choices: np.ndarray, space: Space) -> np.ndarray:
    """``(n, len(COSTS))`` natural logs of the analytic costs."""
    table = space.cost_table(choices)
    return np.log(np.stack([table.total(c) for c in COSTS], axis=1).astype(np.float64))


class Support:
    """The training architectures' region of the space (fit once, saved as ``.npz``)."""

    def __init__(self, space: Space = ANB_SPACE):
        self.space = space

    def fit(self, choices: np.ndarray) -> Support:
        if len(choices) < 3:
            raise ValueError(f"support needs at least 3 training architectures, got {len(choices)}")
        self.positions_ = np.unique(_positions(choices, self.space), axis=0)
        nn = self._nearest(self.positions_, exclude_self=True)
        self.reference_ = float(max(np.quantile(nn, QUANTILE), 1e-9))
        costs = log_costs(choices, self.space)
        self.cost_low_, self.cost_high_ = costs.min(0), costs.max(0)
        return self

    def _nearest(self, points: np.ndarray, exclude_self: bool = False, chunk: int = 2048
                 ) -> np.ndarray:
        """Euclidean distance to the nearest training architecture (chunked matrix products)."""
        train = self.positions_
        norms = np.einsum("ij,ij->i", train, train)
        out = np.empty(len(points))
        points = points.astype(np.float32)
        for start in range(0, len(points), chunk):
            block = points[start:start + chunk]
            own = np.einsum("ij,ij->i", block, block)[:, None]
            d2 = norms[None, :] - 2.0 * block @ train.T + own
            if exclude_self:
                d2[d2 < 1e-4] = np.inf  # the point itself (distinct points are >= 1/9 apart)
            out[start:start + chunk] = np.sqrt(np.maximum(d2.min(axis=1), 0.0))
        return out

    def log_macs(self, choices: np.ndarray) -> np.ndarray:
        return log_costs(choices, self.space)[:, 0]

    def score(self, choices: np.ndarray) -> dict[str, np.ndarray]:
        """``ood_distance``, ``ood_cost`` and the flag ``ood`` per architecture."""
        if not len(choices):
            return {"ood_distance": np.zeros(0), "ood_cost": np.zeros(0),
                    "ood": np.zeros(0, dtype=bool)}
        distance = self._nearest(_positions(choices, self.space)) / self.reference_
        costs = log_costs(choices, self.space)
        excess = np.maximum(costs - self.cost_high_, 0) + np.maximum(self.cost_low_ - costs, 0)
        cost = excess.max(axis=1)
        return {"ood_distance": distance, "ood_cost": cost, "ood": (distance > 1) | (cost > 0)}

    @staticmethod
    def inflate(std: np.ndarray, score: dict[str, np.ndarray], trend: float) -> np.ndarray:
        """Predictive std (model space) widened outside the support."""
        spread = std * np.maximum(score["ood_distance"], 1.0)
        return np.sqrt(spread**2 + (trend * score["ood_cost"]) ** 2)

    # ------------------------------------------------------------ persistence
    def save(self, path: Path) -> None:
        with open(path, "wb") as handle:
            np.savez(handle, positions=self.positions_, reference=self.reference_,
                     cost_low=self.cost_low_, cost_high=self.cost_high_)

    @classmethod
    def load(cls, path: Path, space: Space = ANB_SPACE) -> Support:
        with np.load(path, allow_pickle=False) as data:
            out = cls(space)
            out.positions_ = data["positions"]
            out.reference_ = float(data["reference"])
            out.cost_low_, out.cost_high_ = data["cost_low"], data["cost_high"]
        return out


def trend(log_macs: np.ndarray, y: np.ndarray) -> float:
    """``|slope|`` of a target (model space) against log MACs on the training rows."""
    return float(abs(np.polyfit(log_macs, y, 1)[0]))
