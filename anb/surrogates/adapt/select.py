"""Which architectures to measure next on a new device (representative selection).

The adapted model is fitted on the known devices' log costs and the analytic op totals, and it is
scored by how it ranks the whole space, so the measurements should represent where architectures
lie in those features: k-means over a candidate pool (standardised features) with as many
clusters as measured plus wanted architectures; clusters already holding a measured architecture
are covered, and the candidate nearest each remaining centre is suggested. Chosen on the
validation split of ``benchmarks/new_device.py`` against random picks and greedy D-optimal design
(which picks extremes and ranked worse: mean tau 0.930 vs 0.934 at n = 20).
"""
from __future__ import annotations

import numpy as np

from anb.extras import require
from anb.searchspace.base import Space
from anb.surrogates.adapt.model import op_components


def design_features(known_log: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """The columns the selection spreads over: known log costs and log op totals."""
    return np.concatenate([known_log, np.log1p(ops[:, :6])], axis=1)


def select(candidates: np.ndarray, k: int, measured: np.ndarray | None = None,
           seed: int = 0) -> np.ndarray:
    """Indices of ``k`` distinct rows of ``candidates`` (feature matrix) to measure next."""
    KMeans = require("sklearn.cluster", "fit", "choosing the architectures to measure").KMeans

    if k < 1 or k > len(candidates):
        raise ValueError(f"k must be between 1 and the {len(candidates)} candidates, got {k}")
    done = np.zeros((0, candidates.shape[1])) if measured is None else measured
    mu, sd = candidates.mean(0), candidates.std(0) + 1e-12
    Z, M = (candidates - mu) / sd, (done - mu) / sd
    clusters = min(k + len(M), len(Z))
    centres = KMeans(clusters, n_init=3, random_state=seed).fit(Z).cluster_centers_
    free = np.ones(len(centres), dtype=bool)
    gaps = ((M[:, None, :] - centres[None]) ** 2).sum(2) if len(M) else np.zeros((0, clusters))
    for row in np.argsort(gaps.min(1)):  # measured rows cover their nearest free centre,
        if free.sum() == k:                # closest first, leaving k centres to fill
            break
        dist = np.where(free, gaps[row], np.inf)
        free[int(np.argmin(dist))] = False
    chosen: list[int] = []
    for centre in centres[free][:k]:
        dist = ((Z - centre) ** 2).sum(1)
        dist[chosen] = np.inf
        chosen.append(int(np.argmin(dist)))
    return np.array(chosen)


def candidate_pool(n: int, seed: int, exclude: np.ndarray | None = None,
                   *, space: Space) -> np.ndarray:
    """A seeded sample of ``n`` architectures (raw choices) none of which is in ``exclude``."""
    from anb.searchspace.sampler import Sampler

    sampler = Sampler(seed, space=space)
    pool = sampler.sample_choices(n + (0 if exclude is None else len(exclude)))
    if exclude is not None and len(exclude):
        taken = set(space.index_from_choices(exclude).tolist())
        keep = np.array([i not in taken for i in space.index_from_choices(pool).tolist()])
        pool = pool[keep]
    return pool[:n]


def suggest(known, k: int, measured: np.ndarray | None = None, pool: np.ndarray | None = None,
            n_candidates: int = 5000, seed: int = 0, *, space: Space
            ) -> np.ndarray:
    """Raw choices of ``k`` architectures to measure next: distinct, none already measured.

    ``known``: a :class:`~anb.surrogates.adapt.model.KnownDevices`; ``measured``: raw choices
    already measured; ``pool``: candidate raw choices (default: ``n_candidates`` sampled ones).
    """
    if pool is None:
        pool = candidate_pool(n_candidates, seed, measured, space=space)
    elif measured is not None and len(measured):
        taken = set(space.index_from_choices(measured).tolist())
        pool = pool[[i not in taken for i in space.index_from_choices(pool).tolist()]]
    _, first = np.unique(space.index_from_choices(pool), return_index=True)
    pool = pool[np.sort(first)]
    feats = design_features(known.log_costs(pool), op_components(pool, space))
    done = None
    if measured is not None and len(measured):
        done = design_features(known.log_costs(measured), op_components(measured, space))
    return pool[select(feats, k, done, seed)]
