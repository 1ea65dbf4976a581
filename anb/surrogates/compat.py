"""The reference benchmark's query API on anb's surrogates.

Scripts written for the reference run with only their import lines changed::

    import anb.surrogates.compat as anb                      # was: import accelnb as anb
    from anb.surrogates.compat import EfficientNetSS as ss   # was: configurationspaces.searchspaces

    acc_model = anb.ANBEnsemble("xgb", seed=3).load_ensemble()
    thr_model = anb.ANBEnsemble("xgb", device="tpuv2", metric="throughput").load_ensemble()
    mean, std = acc_model.query(ss().random_sample(4))

Architectures may be ConfigSpace ``Configuration`` objects (one or a list), any mapping with
``block{i}_{e,k,l,se}`` keys, anb ``Arch`` objects or strings. Answers are anb's: ``std`` is the
predictive std (wider out of distribution) and ``query_noise`` draws observation noise.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anb import resources
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE
from anb.surrogates.benchmark import SurrogateBenchmark

#: The reference's devices and the metrics each one has.
SUPPORTED_METRICS = {"3090": ["throughput"], "a100": ["throughput"], "tpuv2": ["throughput"],
                     "tpuv3": ["throughput"], "zcu102": ["latency", "throughput"],
                     "vck190": ["latency", "throughput"]}


def _single(configs: Any) -> bool:
    return isinstance(configs, (Mapping, Arch, str))


def _shape(configs: Any, values: np.ndarray) -> Any:
    """A scalar for one architecture given alone (``acc, _ = b.query(config)``), else an array."""
    return np.float64(values[0]) if _single(configs) else values


def _archs(configs: Any) -> list:
    """One architecture or many, as a list anb's query reads."""
    if isinstance(configs, (Mapping, Arch, str)):
        configs = [configs]
    return [dict(c) if isinstance(c, Mapping) else c for c in configs]


class EnsembleView:
    """One metric of a benchmark, queried the reference way (``members``: a subset, or all)."""

    def __init__(self, bench: SurrogateBenchmark, metric: str, members: list[int] | None = None,
                 seed: int | None = None):
        self.bench = bench
        self.metric = bench.resolve(metric)[0]
        self.members = members
        self.seed = seed

    def _members(self, configs: Any) -> np.ndarray:
        choices = self.bench.choices(_archs(configs))
        if not len(choices):
            return np.zeros((0, 1))
        X = self.bench.builder.transform(choices)
        preds = self.bench._member_predictions(X, [self.metric])[self.metric]
        preds = preds if self.members is None else preds[:, self.members]
        return np.exp(preds) if self.bench.transforms[self.metric] == "log" else preds

    def query(self, configs: Any) -> tuple[Any, Any]:
        """``(mean, std)``: arrays for a list of architectures, scalars for one given alone."""
        if self.members is not None:
            preds = self._members(configs)
            mean, std = preds.mean(1), preds.std(1)
        else:
            frame = self.bench.query(_archs(configs), self.metric)
            mean, std = frame[self.metric].to_numpy(), frame[f"{self.metric}_std"].to_numpy()
        return _shape(configs, mean), _shape(configs, std)

    def query_mean(self, configs: Any) -> np.ndarray:
        return self.query(configs)[0]

    def query_std(self, configs: Any) -> np.ndarray:
        return self.query(configs)[1]

    def query_members(self, configs: Any) -> np.ndarray:
        """``(n, members)`` every member's prediction (original units)."""
        return self._members(configs)

    def query_ood(self, configs: Any) -> np.ndarray:
        """anb's out-of-distribution flag per architecture."""
        return self.bench.query(_archs(configs), self.metric)["ood"].to_numpy()[
            0 if _single(configs) else slice(None)]

    def query_noise(self, configs: Any, seed: int | None = None) -> np.ndarray:
        """One plausible repeated measurement per architecture (observation noise, seeded)."""
        seed = self.seed if seed is None else seed
        frame = self.bench.query(_archs(configs), self.metric, noise=True, seed=seed)
        return _shape(configs, frame[self.metric].to_numpy())


def _load(path: str | Path) -> SurrogateBenchmark:
    from anb.surrogates.packaged import load

    bench = load(path)
    if not isinstance(bench, SurrogateBenchmark):
        raise ValueError(f"{str(path)!r} is an adapted benchmark; the reference-compatible API "
                         "reads 'anb fit' benchmarks (query an adapted one with anb.load(path))")
    return bench


def _target(metric: str | None, device: str | None) -> str:
    if device is None:
        if metric not in (None, "accuracy", "val_top1"):
            raise ValueError(f"metric {metric!r} needs a device; "
                             f"devices: {sorted(SUPPORTED_METRICS)}")
        return "val_top1"
    if metric not in ("throughput", "latency"):
        raise ValueError(f"device {device!r} needs metric 'throughput' or 'latency', "
                         f"got {metric!r}")
    return f"{metric}_{device}"


class ANBEnsemble:
    """``ANBEnsemble(model, device=None, metric=None, seed=None)`` as in the reference.

    ``model`` names the reference's family (``"xgb"``, ``"lgb"``...); anb serves its own
    fitted benchmark for every name. ``path``: an artifact folder (default: the packaged one).
    """

    def __init__(self, model: str = "xgb", device: str | None = None, metric: str | None = None,
                 seed: int | None = None, path: str | Path = resources.PACKAGED_BENCHMARK):
        self.model, self.device, self.seed, self.path = model, device, seed, path
        self.metric = metric
        self.target = _target(metric, device)

    def _bench(self) -> SurrogateBenchmark:
        bench = _load(self.path)
        if self.target not in bench.metrics:
            raise ValueError(f"unknown device {self.device!r} for {self.metric!r}; this "
                             f"benchmark has {bench.metrics}")
        return bench

    def load_ensemble(self) -> EnsembleView:
        return EnsembleView(self._bench(), self.target, seed=self.seed)

    def load_model(self) -> EnsembleView:
        """A single member (the reference's one-model surrogate)."""
        return EnsembleView(self._bench(), self.target, members=[0], seed=self.seed)


class EfficientNetSS:
    """The reference's search-space wrapper (ConfigSpace names ``block{i}_{e,k,l,se}``)."""

    def __init__(self, seed: int | None = None):
        from anb.searchspace.configspace import to_configspace

        self.ss = to_configspace(ANB_SPACE, seed=seed)

    def random_sample(self, num_samples: int = 1):
        return self.ss.sample_configuration(num_samples)

    def manual_sample(self, sample_config: list):
        """``[[e x7], [k x7], [l x7], [se x7]]`` as a ``Configuration``."""
        from ConfigSpace import Configuration

        fields = ("e", "k", "l", "se")
        if len(sample_config) != 4 or any(len(v) != ANB_SPACE.num_stages for v in sample_config):
            raise ValueError("manual_sample needs 4 lists (e, k, l, se) of "
                             f"{ANB_SPACE.num_stages} values each")
        values = {f"block{i}_{f}": (bool(v[i]) if f == "se" else int(v[i]))
                  for f, v in zip(fields, sample_config, strict=True)
                  for i in range(ANB_SPACE.num_stages)}
        return Configuration(self.ss, values=values)

    def efficientnet_b0(self):
        return self.manual_sample([[1, 6, 6, 6, 6, 6, 6], [3, 3, 5, 3, 5, 5, 3],
                                   [1, 2, 2, 3, 3, 4, 1], [True] * 7])

    def size(self) -> int:
        return ANB_SPACE.size()

    def __len__(self) -> int:
        return ANB_SPACE.size()


def load_ensemble(path: str | Path, metric: str = "accuracy", device: str | None = None
                  ) -> EnsembleView:
    """``metric`` is ``accuracy``, ``throughput`` or ``latency``; device metrics need ``device``."""
    return ANBEnsemble("anb", device, None if metric == "accuracy" else metric,
                       path=path).load_ensemble()
