"""The error an adapted model's std scales, by the regime of the out-of-fold choice.

The std is a multiple of an out-of-fold RMSE (``model.CHOICE_STD_FACTORS``), and which RMSE
depends on how many rows it is estimated from (:func:`std_error`):

- below ``rule.choice_min`` rows (no choice: the additive transfer predicts) the RMSE of 4-row
  refits is itself noisy, and its noise is most of the spread between fits: on the settings
  splits the log of the scale each fit needs for 90 % coverage of its query rows rises with
  the log of that RMSE by a slope of about 0.5, not 1. :func:`error_scale` shrinks it, in log
  space, towards the spread of the measured log costs (their sd): a ratio of error to spread
  pooled over devices stands in for the part of the RMSE that is sampling noise;
- in the squared-error regime (up to ``rule.rank_from``) the additive transfer's RMSE, not
  the choice's own: on 10 rows the choice's out-of-fold error jumps with the candidate each
  left-out row picks, and the transfer's is the steadier scale;
- from ``rule.rank_from`` the choice's own out-of-fold RMSE.

Chosen with ``benchmarks/adapt_calibration.py`` on both settings datasets: HELP's settings
splits (valid, lomo, family_valid) and the released dataset's validation split (both
protocols of ``benchmarks/new_device.py``); docs/decisions/help-transfer.md has the figures.
"""
from __future__ import annotations

import numpy as np

from anb.surrogates.adapt.choice import ChoiceRule

#: The weight of the RMSE in the log of the scale below ``choice_min`` rows (1: the RMSE
#: alone, 0: the spread alone). At n = 5 among 0.3-0.8 (each with its multiplier re-chosen)
#: 0.5 put the most fits' coverage inside 0.85-0.95: 0.29 of HELP's settings fits and 0.12
#: of the released dataset's, against 0.15 and 0.06 for the RMSE alone; CRPS 0.051 / 0.113
#: against 0.067 / 0.123.
SHRINK_WEIGHT = 0.5


def error_scale(rmse: float, y: np.ndarray, weight: float = SHRINK_WEIGHT) -> float:
    """``sd(y) ** (1 - weight) * rmse ** weight``: the out-of-fold ``rmse`` of a fit on log
    costs ``y`` shrunk in log space towards their spread; ``rmse`` itself where either is 0
    (no spread to shrink towards)."""
    spread = float(np.std(y, ddof=1))
    if not (spread > 0 and rmse > 0):
        return rmse
    return spread ** (1.0 - weight) * rmse**weight


def std_error(choice_rmse: float, transfer_rmse: float, y: np.ndarray,
              rule: ChoiceRule) -> float:
    """The error the std of a fit on log costs ``y`` scales under ``rule``: ``choice_rmse``
    (the choice scored out of fold) shrunk by :func:`error_scale` below ``rule.choice_min``
    rows, ``transfer_rmse`` (the additive transfer's out-of-fold RMSE) below
    ``rule.rank_from``, else ``choice_rmse``."""
    if len(y) < rule.choice_min:
        return error_scale(choice_rmse, y)
    return transfer_rmse if len(y) < rule.rank_from else choice_rmse
