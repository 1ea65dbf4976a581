"""A fitted anb benchmark as a Syne Tune blackbox, ready for ``UserBlackboxBackend``.

    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    bb = AnbBlackbox(anb.load(), constraints=["latency_zcu102<=5"])
    backend = UserBlackboxBackend(bb, elapsed_time_attr=ELAPSED_TIME)

The configuration space is generated from the benchmark's search space (one ``ordinal`` per
numeric variable, one ``choice`` per named one). Every evaluation reports each objective (by
default every metric the benchmark predicts: ``val_top1``, each device metric, ``train_time``),
``neg_<metric>`` for each maximised one (Syne Tune's schedulers minimise every metric they are
given), ``constraint_<i>`` = value - bound for each ``<=`` constraint (bound - value for ``>=``;
<= 0 is feasible, the convention of Syne Tune's constrained searchers) with ``feasible`` (1 or
0), and ``elapsed_time``: the predicted ``train_time`` in seconds when the benchmark has it
(else 1 per evaluation), so the simulator's clock advances by the training a trial would cost.
``noise=True`` draws one plausible repeated measurement per (seed, architecture, metric); the
seed is the backend's (``UserBlackboxBackend(seed=...)``), else the blackbox's.

Fidelity: a benchmark fitted on learning curves (``val_top1_epoch_<i>`` targets) reports one
row per epoch ``i`` (``val_top1`` is then the epoch's, at the last one the benchmark's own
``val_top1``; ``elapsed_time`` the share ``i / E`` of ``train_time``), so multi-fidelity
schedulers (ASHA, MOASHA) can stop trials early; a benchmark without curves has one fidelity,
the finished training (``epoch`` = 1).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from anb.extras import missing

try:
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.config_space import choice, ordinal
except ModuleNotFoundError as err:
    raise missing(err, "syne-tune",
                  "the Syne Tune blackbox (anb.integrations.syne_tune)") from None

from anb.integrations.common import (
    check_metrics,
    domains,
    maximised,
    parse_constraints,
    to_choices,
)
from anb.nas.objectives import Constraint
from anb.records import curve_epochs, curve_key

#: The fidelity attribute (an epoch count) and the simulated time attribute (seconds).
FIDELITY = "epoch"
ELAPSED_TIME = "elapsed_time"
TIME_METRIC = "train_time"


class AnbBlackbox(Blackbox):
    """Syne Tune blackbox of a fitted benchmark (any search space; see the module doc)."""

    def __init__(self, bench: Any, objectives: Sequence[str] | None = None,
                 constraints: Sequence[str | Constraint] = (), noise: bool = True,
                 seed: int = 0):
        self.epochs = curve_epochs(bench.metrics)
        metrics = [m for m in bench.metrics if m not in map(curve_key, self.epochs)]
        self.bench = bench
        self.objectives = check_metrics(objectives, metrics)
        self.constraints = parse_constraints(constraints, metrics)
        self.noise, self.seed = noise, seed
        self.has_time = TIME_METRIC in bench.metrics
        config_space = {d.name: ordinal(list(d.values), kind="equal") if d.ordered
                        else choice(list(d.values)) for d in domains(bench.space)}
        names = [*self.objectives, *(f"neg_{m}" for m in self.objectives if maximised(m)),
                 *(f"constraint_{i}" for i in range(len(self.constraints))),
                 *(["feasible"] if self.constraints else []), ELAPSED_TIME]
        fidelities = self.epochs or [1]
        super().__init__(configuration_space=config_space,
                         fidelity_space={FIDELITY: ordinal(fidelities, kind="equal")},
                         objectives_names=names)

    @property
    def fidelity_values(self) -> np.ndarray:
        return np.array(self.epochs or [1])

    def evaluate(self, configs: Sequence[Mapping[str, Any]], seed: int | None = None
                 ) -> pd.DataFrame:
        """Every objective column for many configurations at once (the final fidelity),
        one row per configuration: the vectorised form of an evaluation."""
        frames = self._frames(configs, seed)
        return frames[-1]

    def _frames(self, configs: Sequence[Mapping[str, Any]], seed: int | None
                ) -> list[pd.DataFrame]:
        """One frame of objective columns per fidelity (rows: ``configs``)."""
        choices = to_choices(configs, self.bench.space)
        wanted = list(dict.fromkeys([*self.objectives, *(c.metric for c in self.constraints),
                                     *([TIME_METRIC] if self.has_time else []),
                                     *map(curve_key, self.epochs)]))
        seed = self.seed if seed is None else seed
        q = self.bench.query(choices, wanted, noise=self.noise, seed=seed)
        frames = []
        fidelities: list[int | None] = [*self.epochs] or [None]
        for epoch in fidelities:
            values = {m: q[m].to_numpy(dtype=float) for m in self.objectives}
            if epoch is not None and epoch != self.epochs[-1] and "val_top1" in values:
                values["val_top1"] = q[curve_key(epoch)].to_numpy(dtype=float)
            for m in self.objectives:
                if maximised(m):
                    values[f"neg_{m}"] = -values[m]
            feasible = np.ones(len(q), dtype=bool)
            for i, c in enumerate(self.constraints):
                value = q[c.metric].to_numpy(dtype=float)
                values[f"constraint_{i}"] = value - c.bound if c.upper else c.bound - value
                feasible &= c.satisfied(value)
            if self.constraints:
                values["feasible"] = feasible.astype(float)
            share = 1.0 if epoch is None else epoch / self.epochs[-1]
            values[ELAPSED_TIME] = (q[TIME_METRIC].to_numpy(dtype=float) * share
                                    if self.has_time else np.full(len(q), share))
            frames.append(pd.DataFrame(values, columns=self.objectives_names))
        return frames

    def _objective_function(self, configuration: dict[str, Any],
                            fidelity: dict | None = None, seed: int | None = None
                            ) -> dict[str, float] | np.ndarray:
        frames = self._frames([configuration], seed)
        if fidelity is None:  # every fidelity: (num_fidelities, num_objectives)
            return np.stack([f.to_numpy()[0] for f in frames])
        epochs = list(self.fidelity_values)
        value = fidelity[FIDELITY]
        if value not in epochs:
            raise ValueError(f"fidelity {FIDELITY}={value!r} is not one of {epochs}")
        row = frames[epochs.index(value)].iloc[0]
        return {str(k): float(v) for k, v in row.items()}


def mo_scheduler(bb: AnbBlackbox, method: str = "morea", seed: int = 0,
                 objectives: Sequence[str] | None = None, **kwargs: Any) -> Any:
    """A Syne Tune multi-objective scheduler on ``bb``'s objectives (default: all of them),
    each minimised in its ``neg_`` form when larger is better: ``"morea"`` (multi-objective
    regularized evolution; ``kwargs`` go to it) or ``"random"`` (random search)."""
    from syne_tune.optimizer.schedulers.multiobjective import (
        MultiObjectiveRegularizedEvolution,
    )
    from syne_tune.optimizer.schedulers.searchers.random_searcher import (
        MultiObjectiveRandomSearcher,
    )
    from syne_tune.optimizer.schedulers.single_fidelity_scheduler import (
        SingleFidelityScheduler,
    )

    metrics = minimised_names(check_metrics(objectives, bb.objectives))
    searchers = {"morea": MultiObjectiveRegularizedEvolution,
                 "random": MultiObjectiveRandomSearcher}
    if method == "morea":
        kwargs.setdefault("multiobjective_priority", rank_priority())
    if method in searchers:
        searcher = searchers[method](bb.configuration_space, random_seed=seed, **kwargs)
        return SingleFidelityScheduler(bb.configuration_space, metrics=metrics,
                                       do_minimize=True, searcher=searcher, random_seed=seed)
    raise ValueError(f"unknown method {method!r}; allowed: 'morea', 'random'")


def rank_priority() -> Any:
    """MO-REA's parent score as each element's rank in the non-dominated sort (lower is
    better). Syne Tune 0.16's default ``NonDominatedPriority`` returns the sorted *indices*,
    which MO-REA reads as per-element scores, so its parents are picked almost at random."""
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import (
        NonDominatedPriority,
    )

    class RankPriority(NonDominatedPriority):
        def priority_unsafe(self, objectives: np.ndarray) -> np.ndarray:
            order = np.asarray(super().priority_unsafe(objectives))
            ranks = np.empty(len(order), dtype=np.int64)
            ranks[order] = np.arange(len(order))
            return ranks

    return RankPriority()


def minimised_names(objectives: Sequence[str]) -> list[str]:
    """The column of each objective a minimising scheduler is given (``neg_<m>`` if larger
    is better)."""
    return [f"neg_{m}" if maximised(m) else m for m in objectives]


def simulate(bb: AnbBlackbox, scheduler: Any, seconds: float, n_workers: int = 4,
             seed: int | None = None, quiet: bool = True, tick: float = 5.0) -> pd.DataFrame:
    """Run ``scheduler`` on ``bb`` under simulated time until ``seconds`` of simulated
    training (``elapsed_time`` per trial, ``n_workers`` in parallel) have passed; return
    every result (one row per trial and fidelity, ``st_tuner_time`` the simulated clock).
    Syne Tune writes its usual experiment folder (``$SYNETUNE_FOLDER``, else
    ``~/syne-tune``); ``quiet``: without its progress tables. ``tick``: simulated seconds
    the clock moves per round of the tuner's loop (Syne Tune's default, 5 s); a free worker
    starts its next trial at the next tick. Each round costs real time: a tick well below
    a trial's duration and above 5 s makes a long simulation cheaper."""
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.tuner_logger import TunerLogger

    backend = UserBlackboxBackend(bb, elapsed_time_attr=ELAPSED_TIME,
                                  seed=bb.seed if seed is None else seed,
                                  tuner_sleep_time=tick)
    callback = SimulatorCallback()
    tuner = Tuner(trial_backend=backend, scheduler=scheduler,
                  stop_criterion=StoppingCriterion(max_wallclock_time=seconds),
                  n_workers=n_workers, sleep_time=0, callbacks=[callback],
                  print_update_interval=1e9, results_update_interval=1e9, save_tuner=False,
                  output_logger=_silent(TunerLogger)() if quiet else None)
    tuner.run()
    return callback.dataframe()


def _silent(logger: type) -> type:
    """``logger`` with every ``print_*`` method a no-op."""
    return type(f"Silent{logger.__name__}", (logger,),
                {n: lambda *_, **__: None for n in dir(logger) if n.startswith("print")})
