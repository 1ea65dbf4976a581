"""wandb logging: one run per architecture (config, per-epoch metrics, summary, artifact).

Run ids are derived from the architecture, the recipe hash and the seed, so a resumed
architecture continues its own run, and neither two architectures nor two seed replicates of
one (how the label-noise floor is measured) share an id. The default project is one per recipe
(``anb-<recipe hash>``), so a smoke run never lands beside ImageNet results. Modes: online, offline,
disabled. Only rank 0 logs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.wandb_log") from None

from anb.collect_accuracy.config import Config


def run_id(arch_id: str, recipe_hash: str, seed: int) -> str:
    return f"{arch_id}-{recipe_hash[:8]}-s{seed}"


def own_service() -> None:
    """Start this process's own wandb service rather than one inherited from a parent.

    wandb hands its service to child processes through ``WANDB_SERVICE`` (a token naming the
    owner's pid). A job sharing its parent's service leaves its run open there when it is
    killed, and the rerun's resume of that run id is refused ("run ID ... is in use").
    """
    token = os.environ.get("WANDB_SERVICE", "")
    if token and token.split("-")[1:2] != [str(os.getpid())]:
        del os.environ["WANDB_SERVICE"]


def project(config: Config, recipe_hash: str) -> str:
    return config["logging"]["wandb_project"] or f"anb-{recipe_hash[:8]}"


def artifact_name(arch_id: str, recipe_hash: str, seed: int) -> str:
    return f"arch-{run_id(arch_id, recipe_hash, seed)}"


def flat_config(config: Config) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, keys in config.items() for k, v in keys.items()}


class WandbRun:
    """A wandb run for one architecture; a no-op when disabled or not on rank 0."""

    def __init__(self, config: Config, arch_id: str, recipe_hash: str, extra: dict[str, Any],
                 active: bool):
        log = config["logging"]
        self.run = None
        self.recipe_hash, self.seed = recipe_hash, config["model"]["seed"]
        if not active or log["wandb_mode"] == "disabled":
            return
        import wandb

        root = Path(log["wandb_dir"] or Path(log["folder"]) / "wandb")
        root.mkdir(parents=True, exist_ok=True)
        own_service()
        self.run = wandb.init(
            project=project(config, recipe_hash), entity=log["wandb_entity"] or None,
            mode=log["wandb_mode"], dir=str(root),
            id=run_id(arch_id, recipe_hash, config["model"]["seed"]),
            name=f"{extra.get('arch', arch_id)}", group=f"seed{config['model']['seed']}",
            job_type="train-arch", resume="allow",
            config={**flat_config(config), **extra, "recipe_hash": recipe_hash},
            settings=wandb.Settings(console="off", x_disable_stats=not log["wandb_stats"]),
        )

    def log_epoch(self, metrics: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log(metrics, step=int(metrics["epoch"]))

    def finish(self, record: dict[str, Any], weights: dict[str, Any] | None,
               log_artifact: bool) -> None:
        """Summary (final metrics + the record as JSON), the artifact, and close the run."""
        if self.run is None:
            return
        import wandb

        # "best_" keys: plain metric names would be overwritten by the last history row
        self.run.summary.update({**{f"best_{k}": v for k, v in record["metrics"].items()},
                                 **record["model_info"], "status": "finished",
                                 "record": json.dumps(record)})
        if log_artifact:
            arch_id = record["provenance"]["arch_id"]
            metadata = {"arch": record["provenance"]["arch"], **record["metrics"]}
            artifact = wandb.Artifact(artifact_name(arch_id, self.recipe_hash, self.seed),
                                      type="anb-arch", metadata=metadata)
            folder = Path(self.run.dir)
            record_file = folder / "record.json"
            record_file.write_text(json.dumps(record, indent=2))
            artifact.add_file(str(record_file), name="record.json")
            if weights is not None:
                torch.save(weights, folder / "weights.pt")
                artifact.add_file(str(folder / "weights.pt"), name="weights.pt")
            self.run.log_artifact(artifact)
        self.run.finish()
        self.run = None

    def abort(self) -> None:
        """Close the run as failed (the architecture will be resumed later)."""
        if self.run is not None:
            self.run.finish(exit_code=1)
            self.run = None
