"""Sectioned recipe configuration: INI file + ``--section.key value`` command-line overrides.

The layout follows the reference trainer's INI sections. Every key has a typed default here;
a file or an override may only set known keys (an unknown key is an error naming the allowed
ones). The resolved configuration is a plain ``{section: {key: value}}`` dict.
"""
from __future__ import annotations

import configparser
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anb.io import read_text
from anb.preprocessing import VAL_CROP_RATIO
from anb.searchspace.base import MAX_RESOLUTION

Config = dict[str, dict[str, Any]]

#: section -> key -> (default, help). The type of the default is the key's type.
SCHEMA: dict[str, dict[str, tuple[Any, str]]] = {
    "logging": {
        "folder": ("results", "Output folder: records/, skipped/, checkpoints/, "
                              "locks/, config-<hash>.ini."),
        "wandb_mode": ("disabled", "wandb mode: online, offline or disabled."),
        "wandb_project": ("", "wandb project name; empty = anb-<recipe hash> (one project "
                              "per recipe, so runs of different recipes never mix)."),
        "wandb_entity": ("", "wandb entity (team); empty = default."),
        "wandb_dir": ("", "wandb run folder root; empty = <folder>/wandb."),
        "log_artifacts": (True, "Log one artifact (weights + record) per architecture."),
        "progress": (True, "Show a progress bar on rank 0."),
        "lock": (True, "Claim each architecture so that concurrent jobs on one folder "
                       "never train it twice (how: claims.backend); false = no claims."),
        "wandb_stats": (True, "wandb system metrics (GPU/CPU/memory use over time)."),
    },
    "model": {
        "space": ("anb-mnasnet", "Search space: anb-mnasnet (2-D) or anb-seq1d (1-D)."),
        "num_models": (1, "How many architectures of the sampler stream to train."),
        "seed": (0, "Sampler seed."),
        "shard": ("0/1", "Sampler shard 'i/k'."),
        "archs": ("", "Explicit architectures instead of sampling: strings separated by "
                      "commas, or a CSV file (e.g. a search's pareto.csv) with an 'arch' "
                      "column."),
        "max_attempts": (3, "Failed trainings of one architecture (over reruns) before it "
                            "is given up."),
        "max_replacements": (-1, "Designs of the shard tried beyond num_models to replace "
                                 "skipped and failed ones (-1 = num_models)."),
        "activation": ("relu", "relu (ReLU/hard-sigmoid, the dataset's) or silu."),
        "dropout": (0.2, "Dropout before the classifier."),
        "drop_path": (0.2, "Stochastic depth rate of the last layer."),
        "mem_budget_gb": (0.0, "Skip designs whose fwd+bwd peak exceeds this (0 = no check)."),
        "mem_check_batch": (0, "Per-rank batch of the memory check (0 = trainval.batch_size)."),
    },
    "dataloader": {
        "kind": ("digits", "ffcv, folder, digits (bundled) or numpy (1-D tasks)."),
        "train_path": ("", "Training data: .beton file, image folder or .npz file."),
        "val_path": ("", "Validation data (same kind as train_path)."),
        "num_workers": (2, "Loader worker processes per rank."),
        "image_size": (64, "digits only: side of the upscaled source images."),
        "task": ("classification", "numpy only: classification, ecg (macro-F1) or "
                 "multilabel (mean AUROC)."),
        "in_memory": (True, "ffcv only: load the .beton into memory."),
    },
    "trainval": {
        "epochs": (16, "Training epochs."),
        "batch_size": (512, "Per-rank training batch size."),
        "global_batch": (0, "Keep this global batch on any number of ranks (per-rank batch "
                            "= global_batch / world size); 0 = batch_size x world size."),
        "val_batch_size": (256, "Per-rank validation batch size."),
        "min_res": (160, "Training resolution up to start_ramp."),
        "max_res": (192, "Training resolution from end_ramp."),
        "start_ramp": (11, "Last epoch at min_res."),
        "end_ramp": (13, "First epoch at max_res."),
        "res_step": (32, "Ramp resolutions are rounded to a multiple of this."),
        "val_res": (256, "Validation resolution (centre crop of ratio crop_ratio, resized)."),
        "crop_ratio": (VAL_CROP_RATIO, "Validation centre-crop ratio (224/256)."),
        "crop_scale": (0.08, "Training random-resized-crop: smallest crop as a fraction of the "
                             "image area (0.08 = the reference's; 1 = whole image)."),
        "hflip": (True, "Training: mirror half the images horizontally (the reference's)."),
        "eval_epochs": (3, "Validate in the last this-many epochs; store the best."),
        "curve": (False, "Also validate after every other epoch and store the learning curve "
                         "(val_top1_epoch_<i>); the stored val_top1 stays the best of the last "
                         "eval_epochs. Validation time counts in train_time."),
        "label_smoothing": (0.1, "Label smoothing of the cross-entropy loss."),
        "max_steps": (0, "Cap on training steps per epoch (0 = full epoch; for smoke runs)."),
        "max_val_steps": (0, "Cap on validation steps (0 = full set)."),
        "amp": (True, "fp16 autocast + grad scaler on CUDA (always fp32 on CPU)."),
        "channels_last": (True, "channels_last memory format on CUDA."),
        "randaugment_ops": (0, "RandAugment (torchvision): ops per image; 0 = off (proxy)."),
        "randaugment_magnitude": (9, "RandAugment magnitude (0..30)."),
        "ema_decay": (0.0, "EMA of weights, decay per step; validation uses the EMA; 0 = off."),
    },
    "optimizer": {
        "name": ("sgd", "sgd (momentum, no Nesterov) or rmsprop (alpha 0.9, eps 1e-3)."),
        "schedule": ("triangular", "triangular (the proxy's), cosine or step; cosine and step "
                                   "start with warmup_epochs of linear warm-up."),
        "warmup_epochs": (0.0, "cosine/step: linear warm-up epochs from lr_start x peak."),
        "min_lr": (0.0, "cosine/step: the lr never goes below this."),
        "step_epochs": (2.4, "step: decay every this many epochs."),
        "step_gamma": (0.97, "step: decay factor."),
        "lr": (0.425, "Peak lr at a global batch of lr_batch (scaled linearly)."),
        "lr_batch": (2048, "Global batch the peak lr refers to."),
        "lr_peak_epoch": (2.0, "Epoch of the triangular schedule's peak."),
        "lr_start": (1e-4, "Initial lr as a fraction of the peak."),
        "momentum": (0.9, "SGD momentum (no Nesterov)."),
        "weight_decay": (1e-4, "Weight decay on >= 2-D weights (none on BN and biases)."),
    },
    "distributed": {
        "backend": ("auto", "auto (nccl on CUDA, gloo on CPU), nccl or gloo."),
        "device": ("auto", "auto (CUDA if available), cuda or cpu."),
        "timeout_s": (1800, "Collective timeout in seconds."),
    },
    "claims": {
        "backend": ("flock", "flock (lock files in <folder>/locks/; needs locks that are "
                             "global across nodes), queue (the shared job queue at "
                             "claims.queue_url) or none (one job per folder only)."),
        "queue_url": ("", "queue backend: sqlite:///path (one host) or postgresql://... "
                          "(many hosts)."),
        "lease_s": (7200.0, "queue backend: lease of a claim, renewed after every epoch; "
                            "must exceed the longest epoch."),
        "probe": (True, "Multi-node jobs check at start-up that a lock taken on one node is "
                        "seen on the others (refuses node-local flock)."),
    },
}

CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("logging", "wandb_mode"): ("online", "offline", "disabled"),
    ("model", "space"): ("anb-mnasnet", "anb-seq1d"),
    ("model", "activation"): ("relu", "silu"),
    ("dataloader", "kind"): ("ffcv", "folder", "digits", "numpy"),
    ("dataloader", "task"): ("classification", "ecg", "multilabel"),
    ("distributed", "backend"): ("auto", "nccl", "gloo"),
    ("distributed", "device"): ("auto", "cuda", "cpu"),
    ("optimizer", "name"): ("sgd", "rmsprop"),
    ("optimizer", "schedule"): ("triangular", "cosine", "step"),
    ("claims", "backend"): ("flock", "queue", "none"),
}

#: Numeric keys' allowed ranges: (minimum, maximum, minimum exclusive); None = unbounded.
RANGES: dict[tuple[str, str], tuple[float | None, float | None, bool]] = {
    ("model", "num_models"): (1, None, False),
    ("model", "seed"): (0, None, False),
    ("model", "dropout"): (0, 1, False),
    ("model", "drop_path"): (0, 1, False),
    ("model", "mem_budget_gb"): (0, None, False),
    ("model", "mem_check_batch"): (0, None, False),
    ("dataloader", "num_workers"): (0, None, False),
    ("dataloader", "image_size"): (8, None, False),
    ("trainval", "epochs"): (1, None, False),
    ("trainval", "batch_size"): (1, None, False),
    ("trainval", "val_batch_size"): (1, None, False),
    ("trainval", "min_res"): (8, None, False),
    ("trainval", "max_res"): (8, None, False),
    ("trainval", "start_ramp"): (0, None, False),
    ("trainval", "end_ramp"): (0, None, False),
    ("trainval", "res_step"): (1, None, False),
    ("trainval", "val_res"): (8, None, False),
    ("trainval", "crop_ratio"): (0, 1, True),
    ("trainval", "crop_scale"): (0, 1, True),
    ("trainval", "eval_epochs"): (1, None, False),
    ("trainval", "label_smoothing"): (0, 1, False),
    ("trainval", "max_steps"): (0, None, False),
    ("trainval", "max_val_steps"): (0, None, False),
    ("optimizer", "lr"): (0, None, True),
    ("optimizer", "lr_batch"): (1, None, False),
    ("optimizer", "lr_peak_epoch"): (0, None, False),
    ("optimizer", "lr_start"): (0, 1, False),
    ("optimizer", "momentum"): (0, 1, False),
    ("optimizer", "weight_decay"): (0, None, False),
    ("distributed", "timeout_s"): (1, None, False),
    ("model", "max_attempts"): (1, None, False),
    ("model", "max_replacements"): (-1, None, False),
    ("claims", "lease_s"): (0, None, True),
    ("trainval", "global_batch"): (0, None, False),
    ("trainval", "randaugment_ops"): (0, None, False),
    ("trainval", "randaugment_magnitude"): (0, 30, False),
    ("trainval", "ema_decay"): (0, 1, False),
    ("optimizer", "warmup_epochs"): (0, None, False),
    ("optimizer", "min_lr"): (0, None, False),
    ("optimizer", "step_epochs"): (0, None, True),
    ("optimizer", "step_gamma"): (0, 1, True),
}

#: Keys that define how one architecture is trained (hashed into ``recipe_hash`` with the
#: global batch, the peak lr and the datasets' identity). The per-rank batch is not among them:
#: the global batch is what the recipe fixes. Dataset paths are not either (a job may stage
#: the file to local disk): :func:`dataset_identity` stands for them.
#: Keys added after records were stored: each joins the identity only when set to something
#: other than its default, so the hashes of recipes written before it existed still hold.
LATER_RECIPE_KEYS = (("trainval", "crop_scale"), ("trainval", "hflip"), ("trainval", "curve"))
RECIPE_KEYS = {
    "model": ("space", "activation", "dropout", "drop_path"),
    "dataloader": ("kind", "image_size", "task"),
    "trainval": tuple(k for k in SCHEMA["trainval"] if k not in ("batch_size", "global_batch")
                      and ("trainval", k) not in LATER_RECIPE_KEYS),
    "optimizer": tuple(SCHEMA["optimizer"]),
}


#: The largest image side (pixels) and writer-process count ``anb write-ffcv`` takes.
MAX_IMAGE_SIDE = MAX_RESOLUTION
MAX_WRITERS = 256


class ConfigError(ValueError):
    """A configuration file or override is invalid."""


def defaults() -> Config:
    return {section: {key: d for key, (d, _) in keys.items()} for section, keys in SCHEMA.items()}


def _parse(section: str, key: str, raw: Any) -> Any:
    if section not in SCHEMA:
        raise ConfigError(f"unknown config section [{section}]; allowed sections are "
                          f"{list(SCHEMA)}")
    if key not in SCHEMA[section]:
        raise ConfigError(f"unknown config key '{section}.{key}' (value {raw!r}); allowed keys "
                          f"in [{section}] are {list(SCHEMA[section])}")
    default = SCHEMA[section][key][0]
    try:
        if isinstance(default, bool):
            text = str(raw).strip().lower()
            if text not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError
            value: Any = text in ("true", "1", "yes", "on")
        elif isinstance(default, int):
            value = int(str(raw).strip())
        elif isinstance(default, float):
            value = float(str(raw).strip())
        else:
            value = str(raw).strip()
    except ValueError:
        raise ConfigError(f"config key '{section}.{key}': value {raw!r} is not a valid "
                          f"{type(default).__name__}") from None
    allowed = CHOICES.get((section, key))
    if allowed and value not in allowed:
        raise ConfigError(f"config key '{section}.{key}': value {value!r} is not allowed; "
                          f"allowed values are {list(allowed)}")
    if (section, key) in RANGES and not _in_range(value, *RANGES[section, key]):
        raise ConfigError(f"config key '{section}.{key}': value {value!r} is out of range; "
                          f"allowed values are {_range_text(*RANGES[section, key])}")
    return value


def _in_range(value: float, low: float | None, high: float | None, open_low: bool) -> bool:
    if value != value:  # NaN
        return False
    if low is not None and (value <= low if open_low else value < low):
        return False
    return high is None or value <= high


def _range_text(low: float | None, high: float | None, open_low: bool) -> str:
    if high is None:
        return f"{'>' if open_low else '>='} {low}"
    return f"{low} {'<' if open_low else '<='} value <= {high}"


def check_consistency(config: Config) -> None:
    """Checks across keys (each key alone is checked when parsed)."""
    tv = config["trainval"]
    if tv["min_res"] > tv["max_res"]:
        raise ConfigError(f"config keys 'trainval.min_res' / 'trainval.max_res': values "
                          f"{tv['min_res']} > {tv['max_res']}; the ramp only grows")
    if tv["start_ramp"] > tv["end_ramp"]:
        raise ConfigError(f"config keys 'trainval.start_ramp' / 'trainval.end_ramp': values "
                          f"{tv['start_ramp']} > {tv['end_ramp']}; allowed start_ramp <= end_ramp")
    if tv["eval_epochs"] > tv["epochs"]:
        raise ConfigError(f"config key 'trainval.eval_epochs': value {tv['eval_epochs']} must "
                          f"be in 1..trainval.epochs ({tv['epochs']})")
    opt = config["optimizer"]
    if opt["schedule"] != "triangular" and opt["warmup_epochs"] > tv["epochs"]:
        raise ConfigError(f"config key 'optimizer.warmup_epochs': value {opt['warmup_epochs']} "
                          f"is after the last epoch; allowed 0..trainval.epochs ({tv['epochs']})")
    if opt["schedule"] == "triangular" and opt["lr_peak_epoch"] > tv["epochs"]:
        raise ConfigError(f"config key 'optimizer.lr_peak_epoch': value "
                          f"{config['optimizer']['lr_peak_epoch']} is after the last epoch; "
                          f"allowed 0..trainval.epochs ({tv['epochs']})")


def _key_owner(key: str) -> str:
    owners = [s for s, keys in SCHEMA.items() if key in keys]
    if len(owners) != 1:
        every = sorted(f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys)
        raise ConfigError(f"unknown config key {key!r}; allowed keys are {every}")
    return owners[0]


def parse_overrides(args: Sequence[str]) -> list[tuple[str, str, str]]:
    """``--section.key value``, ``--section.key=value`` or ``--key value`` -> triples."""
    out, i = [], 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument {arg!r}; overrides look like "
                              "--section.key value or --key value")
        name = arg[2:].replace("-", "_")
        if "=" in name:
            name, value = name.split("=", 1)
            value = arg.split("=", 1)[1]
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 1
        else:
            raise ConfigError(f"override {arg!r} has no value")
        section, key = name.split(".", 1) if "." in name else (_key_owner(name), name)
        out.append((section, key, value))
        i += 1
    return out


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults <- INI file <- overrides, parsed, checked and returned as a dict."""
    config = defaults()
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"config file {str(path)!r} is a folder; allowed: an INI file")
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        parser = configparser.ConfigParser(interpolation=None)
        # keep key case (configparser's documented hook, typed as a method by typeshed)
        parser.optionxform = str  # type: ignore[assignment, method-assign]
        try:
            parser.read_string(read_text(path), source=str(path))
        except configparser.Error as err:
            raise ConfigError(f"config file {str(path)!r} is not valid INI: "
                              f"{' '.join(str(err).split())}") from None  # one line
        if not parser.sections():  # an empty file (or a CSV) would train the defaults
            raise ConfigError(f"config file {str(path)!r} holds no [section]; allowed: an INI "
                              "file of [section] key = value lines")
        for section in parser.sections():
            for key, raw in parser.items(section):
                config.setdefault(section, {})[key] = _parse(section, key, raw)
    for section, key, raw in parse_overrides(overrides):
        config[section][key] = _parse(section, key, raw)
    check_consistency(config)
    return config


def describe() -> str:
    """Every key with its default and meaning (for ``--help``)."""
    lines = []
    for section, keys in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, (default, text) in keys.items():
            allowed = CHOICES.get((section, key))
            extra = f" ({'/'.join(allowed)})" if allowed else ""
            if (section, key) in RANGES:
                extra += f" ({_range_text(*RANGES[section, key])})"
            lines.append(f"  --{section}.{key} (default {default!r}){extra}: {text}")
    return "\n".join(lines)


def to_ini(config: Config) -> str:
    """The config as INI text (round-trips through :func:`load_config`)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keep key case
    for section, keys in config.items():
        parser[section] = {k: str(v) for k, v in keys.items()}
    lines: list[str] = []

    class _Sink:
        def write(self, text: str) -> None:
            lines.append(text)

    parser.write(_Sink())
    return "".join(lines)


def per_rank_batch(config: Config, world_size: int) -> int:
    """The per-rank batch: ``global_batch / world size`` when the global batch is kept, else
    ``batch_size``; a global batch the ranks cannot share evenly is an error."""
    tv = config["trainval"]
    if not tv["global_batch"]:
        return tv["batch_size"]
    if tv["global_batch"] % world_size:
        raise ConfigError(f"config key 'trainval.global_batch': value {tv['global_batch']} "
                          f"does not divide into {world_size} ranks; allowed: multiples of "
                          f"{world_size}, or 0 (batch_size x world size)")
    return tv["global_batch"] // world_size


def for_world(config: Config, world_size: int) -> Config:
    """The config with ``trainval.batch_size`` resolved for ``world_size`` ranks."""
    out = {s: dict(keys) for s, keys in config.items()}
    out["trainval"]["batch_size"] = per_rank_batch(config, world_size)
    return out


def global_batch(config: Config, world_size: int) -> int:
    return per_rank_batch(config, world_size) * world_size


def peak_lr(config: Config, world_size: int) -> float:
    """Peak lr scaled linearly with the global batch."""
    opt = config["optimizer"]
    return opt["lr"] * global_batch(config, world_size) / opt["lr_batch"]


def dataset_identity(config: Config) -> dict[str, Any]:
    """What identifies the data independent of where it lies: each file's name and size (a
    folder: its name). A copy staged to local disk has the same identity."""
    out: dict[str, Any] = {}
    for key in ("train_path", "val_path"):
        text = config["dataloader"][key]
        path = Path(text) if text else None
        out[key] = None if path is None else {
            "name": path.name, "bytes": path.stat().st_size if path.is_file() else None}
    return out


def recipe_identity(config: Config, world_size: int) -> dict[str, Any]:
    """Everything that defines how an architecture is trained, as recorded and hashed."""
    subset: dict[str, Any] = {s: {k: config[s][k] for k in keys}
                              for s, keys in RECIPE_KEYS.items()}
    for section, key in LATER_RECIPE_KEYS:
        if config[section][key] != SCHEMA[section][key][0]:
            subset[section][key] = config[section][key]
    subset["global_batch"] = global_batch(config, world_size)
    subset["peak_lr"] = round(peak_lr(config, world_size), 12)
    subset["dataset"] = dataset_identity(config)
    return subset


def recipe_hash(config: Config, world_size: int = 1) -> str:
    """16 hex digits of SHA-256 over :func:`recipe_identity`."""
    subset = recipe_identity(config, world_size)
    return hashlib.sha256(json.dumps(subset, sort_keys=True).encode()).hexdigest()[:16]
