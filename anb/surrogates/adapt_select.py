"""Which architectures to measure next on a new device (greedy D-optimal design).

The adapted model is linear in the known devices' log costs and the analytic op totals, so the
most informative next measurement is the candidate whose standardised features the measured set
explains least (largest leverage ``z^T (Z^T Z + I)^-1 z``); each pick updates the inverse by
Sherman-Morrison. Candidates are a seeded sample of the search space (or a given pool).
"""
from __future__ import annotations

import numpy as np

from anb.searchspace.space import ANB_SPACE, SearchSpace
from anb.surrogates.adapt import op_components


def design_features(known_log: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """The columns the selection spreads over: known log costs and log op totals."""
    return np.concatenate([known_log, np.log1p(ops[:, :6])], axis=1)


def select(candidates: np.ndarray, k: int, measured: np.ndarray | None = None,
           ridge: float = 1.0) -> np.ndarray:
    """Indices of ``k`` distinct rows of ``candidates`` (feature matrix) to measure next."""
    if k < 1 or k > len(candidates):
        raise ValueError(f"k must be between 1 and the {len(candidates)} candidates, got {k}")
    everything = candidates if measured is None else np.concatenate([candidates, measured])
    mu, sd = everything.mean(0), everything.std(0) + 1e-12
    Z = (candidates - mu) / sd
    inv = np.eye(Z.shape[1]) / ridge
    if measured is not None and len(measured):
        M = (measured - mu) / sd
        inv = np.linalg.inv(M.T @ M + ridge * np.eye(Z.shape[1]))
    chosen: list[int] = []
    free = np.ones(len(Z), dtype=bool)
    for _ in range(k):
        leverage = np.einsum("ij,jk,ik->i", Z, inv, Z)
        leverage[~free] = -np.inf
        i = int(np.argmax(leverage))
        chosen.append(i)
        free[i] = False
        v = inv @ Z[i]
        inv -= np.outer(v, v) / (1.0 + Z[i] @ v)
    return np.array(chosen)


def candidate_pool(n: int, seed: int, exclude: np.ndarray | None = None,
                   space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """A seeded sample of ``n`` architectures (raw choices) none of which is in ``exclude``."""
    from anb.searchspace.sampler import Sampler

    sampler = Sampler(seed, space)
    pool = sampler.sample_choices(n + (0 if exclude is None else len(exclude)))
    if exclude is not None and len(exclude):
        taken = set(space.index_from_choices(exclude).tolist())
        keep = np.array([i not in taken for i in space.index_from_choices(pool).tolist()])
        pool = pool[keep]
    return pool[:n]


def suggest(known, k: int, measured: np.ndarray | None = None, pool: np.ndarray | None = None,
            n_candidates: int = 5000, seed: int = 0, space: SearchSpace = ANB_SPACE
            ) -> np.ndarray:
    """Raw choices of ``k`` architectures to measure next: distinct, none already measured.

    ``known``: a :class:`~anb.surrogates.adapt.KnownDevices`; ``measured``: raw choices already
    measured; ``pool``: candidate raw choices (default: ``n_candidates`` sampled ones).
    """
    if pool is None:
        pool = candidate_pool(n_candidates, seed, measured, space)
    elif measured is not None and len(measured):
        taken = set(space.index_from_choices(measured).tolist())
        pool = pool[[i not in taken for i in space.index_from_choices(pool).tolist()]]
    _, first = np.unique(space.index_from_choices(pool), return_index=True)
    pool = pool[np.sort(first)]
    feats = design_features(known.log_costs(pool), op_components(pool, space))
    done = None
    if measured is not None and len(measured):
        done = design_features(known.log_costs(measured), op_components(measured, space))
    return pool[select(feats, k, done)]
