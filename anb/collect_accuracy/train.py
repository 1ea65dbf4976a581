"""The torchrun entry point: train a stream of sampled architectures with the proxified recipe.

    torchrun --nproc_per_node 2 -m anb.collect_accuracy.train \\
        --config configs/accuracy/digits_tiny.ini --num_models 3

Each architecture's state is checkpointed atomically after every epoch. Rerunning the same
command after a crash, kill or preemption skips finished (and skipped) architectures, continues
the interrupted one from its last epoch and then the rest of the stream: nothing is lost,
nothing is trained twice. Rank 0 decides and broadcasts the plan, and alone writes files.

An architecture whose training raises (CUDA out-of-memory, a NaN loss, a data error) is
recorded in ``<folder>/failed/<arch_id>/`` with the error, and the stream moves on; a rerun
tries it again until it has failed ``model.max_attempts`` times. A sampled stream replaces
skipped and failed designs with the next ones of the shard, so that ``num_models`` are trained.
With several ranks, only a failure every rank sees (a NaN loss: the loss is all-reduced) can
be continued in place; any other one ends the job after recording it (the other ranks wait in
a collective), and the rerun counts it.

Jobs sharing a results folder (the same shard submitted twice, a requeued job whose old
instance still runs, overlapping shards) cooperate: rank 0 claims each architecture with an
exclusive lock in ``<folder>/locks/`` before training it (see :mod:`.claims`); an architecture
claimed elsewhere is passed over and tried once more at the end of the stream.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from anb.extras import missing

try:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ModuleNotFoundError as err:
    raise missing(err, "train", "training (anb.collect_accuracy.train)") from None

from anb.collect_accuracy import checkpoint, claims, failures, memcheck, provenance, recipe
from anb.collect_accuracy.config import (
    Config,
    ConfigError,
    describe,
    for_world,
    global_batch,
    load_config,
    recipe_hash,
    recipe_identity,
    to_ini,
)
from anb.collect_accuracy.data import Loaders, make_loaders, seed_of
from anb.collect_accuracy.distributed import (
    DistInfo,
    all_gather,
    all_reduce_sum,
    barrier,
    broadcast_object,
    setup,
    teardown,
)
from anb.collect_accuracy.wandb_log import WandbRun, run_id
from anb.io import atomic_write_text
from anb.outputs import Kind, check_folder, prepare_folder
from anb.records import curve_key
from anb.searchspace.arch import Arch
from anb.searchspace.model import build_model
from anb.searchspace.registry import get_space
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import SearchSpace


def _holds_runs(folder: Path) -> bool:
    """A results folder written before anb's output marker."""
    return any((folder / name).is_dir() for name in ("records", "checkpoints", "failed",
                                                      "skipped", "locks")) \
        or any(folder.glob("config-*.ini"))


#: The results folder (``logging.folder``) the trainer writes and resumes; jobs sharing it
#: cooperate through per-architecture claims (see :mod:`anb.outputs`). A SLURM job's log
#: (sbatch's default ``slurm-<id>.out``, the shipped template's ``anb-accuracy-<id>.out``) may
#: be there before the trainer starts.
OUTPUT = Kind("train", "anb train results", _holds_runs,
              companions=("slurm-*.out", "anb-accuracy-*.out"))
FOLDER_OPTION = "--logging.folder"


def _arch_texts(value: str, space: SearchSpace) -> list[str]:
    """``model.archs`` (of ``space``): a CSV file with an ``arch`` column (a search's
    ``pareto.csv``) or ``block{i}_*`` columns, or architecture strings separated by commas."""
    if value.strip().lower().endswith(".csv"):
        from anb.records import read_table, table_archs

        path = Path(value.strip())
        if not path.is_file():
            raise ConfigError(f"config key 'model.archs': file {str(path)!r} does not exist")
        try:
            return [str(a) for a in table_archs(read_table(path), repr(str(path)), space=space)]
        except ValueError as err:
            raise ConfigError(f"config key 'model.archs': {err}") from None
    return [t.strip() for t in value.split(",") if t.strip()]


def architectures(config: Config, space: SearchSpace) -> list[Arch]:
    """The explicit ``model.archs`` list, else the first ``num_models`` of the seeded shard."""
    model = config["model"]
    if model["archs"]:
        out = []
        for text in _arch_texts(model["archs"], space):
            try:
                out.append(Arch.from_string(text, space))
            except ValueError as err:
                raise ConfigError(f"config key 'model.archs': architecture {text!r} is not in "
                                  f"space {space.name!r}: {err}") from None
        return out
    if model["num_models"] < 1:
        raise ConfigError(f"config key 'model.num_models': value {model['num_models']} must "
                          "be >= 1")
    try:
        return Sampler(model["seed"], space=space).sample(model["num_models"], shard=model["shard"])
    except ValueError as err:
        raise ConfigError(f"config key 'model.shard': {err}") from None


def candidates(config: Config, space: SearchSpace, first: list[Arch]) -> Iterator[Arch]:
    """``first``, then (a sampled stream only) the shard's next architectures, to replace
    skipped and failed ones; the sampler's stream is prefix-stable, so these are the same on
    every rerun."""
    yield from first
    model = config["model"]
    if model["archs"]:
        return
    have = len(first)
    while True:
        more = Sampler(model["seed"], space=space).sample(have * 2, shard=model["shard"])[have:]
        if not more:
            return
        yield from more
        have += len(more)


def check_compatible(config: Config, space: SearchSpace) -> None:
    kind = config["dataloader"]["kind"]
    if (space.dims == 1) != (kind == "numpy"):
        raise ConfigError(f"config key 'dataloader.kind': value {kind!r} does not fit space "
                          f"{space.name!r}; the 1-D space takes 'numpy', the 2-D space "
                          "takes ffcv, folder or digits")


class Trainer:
    """Trains one architecture after another on this rank's share of the data."""

    def __init__(self, config: Config, dist: DistInfo, loaders: Loaders, space: SearchSpace):
        self.config, self.dist, self.loaders, self.space = config, dist, loaders, space
        self.folder = Path(config["logging"]["folder"])
        self.hash = recipe_hash(config, dist.world_size)
        self.global_batch = global_batch(config, dist.world_size)
        self.tv, self.opt = config["trainval"], config["optimizer"]
        self.cuda = dist.device.type == "cuda"
        self.amp = self.tv["amp"] and self.cuda
        self.channels_last = self.tv["channels_last"] and self.cuda and space.dims == 2
        steps = loaders.train_steps()
        self.steps = min(steps, self.tv["max_steps"]) if self.tv["max_steps"] else steps
        self._claim: claims.Claim | claims.QueueClaim | None = None
        self.queue: claims.QueueClaims | None = None
        error: ConfigError | None = None
        if dist.is_main and self.claiming and config["claims"]["backend"] == "queue":
            try:
                self.queue = claims.QueueClaims(config["claims"]["queue_url"], self.hash,
                                                config["claims"]["lease_s"])
            except ConfigError as err:
                error = err
        error = broadcast_object(error, dist.world_size)  # every rank stops, none waits
        if error is not None:
            raise error
        if self.cuda:
            torch.backends.cudnn.benchmark = True

    # -- the stream ---------------------------------------------------------------------
    def _folder_state(self, arch: Arch) -> str:
        """done / skipped / failed (``max_attempts`` used up) / todo from the results folder
        (rank 0). A record of another recipe is an error (one folder holds one recipe), so is
        an unreadable one."""
        for name, path in (("done", provenance.record_path(self.folder, arch)),
                           ("skipped", provenance.skipped_path(self.folder, arch))):
            if not path.exists():
                continue
            try:
                prov = json.loads(path.read_text()).get("provenance", {})
                other = prov.get("recipe_hash")
            except (OSError, ValueError, AttributeError) as err:
                raise ConfigError(f"config key 'logging.folder': {str(path)!r} is unreadable "
                                  f"({type(err).__name__}: {err}); remove it to train "
                                  f"architecture {arch.id} again") from None
            if other not in (None, self.hash):
                raise ConfigError(f"config key 'logging.folder': {str(self.folder)!r} holds "
                                  f"{path.name} of recipe {other}, this run's recipe is "
                                  f"{self.hash}; "
                                  + batch_hint(prov, self.global_batch, self.dist.world_size)
                                  + "use one folder per recipe")
            return name
        if failures.attempts(self.folder, arch.id) >= self.config["model"]["max_attempts"]:
            return "failed"
        return "todo"

    def claim(self, arch: Arch) -> tuple[str, str]:
        """Rank 0 decides for every rank: ``(state, detail)`` with state done / skipped (in
        the folder), busy (claimed by another running job; detail names it) or todo (this
        job now holds the architecture's claim, see :mod:`.claims`)."""
        decision: Any = None
        if self.dist.is_main:
            try:
                decision = (self._folder_state(arch), "")
                if decision[0] == "todo" and self.claiming:
                    self._claim = self._try_claim(arch)
                    if self._claim is None:
                        holder = (self.queue.holder(arch.id) if self.queue is not None
                                  else claims.read_holder(self.folder, arch.id))
                        decision = ("busy", claims.describe(holder))
                    else:  # finished by another job between the look and the claim?
                        decision = (self._folder_state(arch), "")
            except ConfigError as err:
                decision = err
            except OSError as err:
                decision = ConfigError(
                    f"config key 'logging.folder': cannot claim architecture {arch.id} in "
                    f"{str(self.folder)!r} ({err})")
        decision = broadcast_object(decision, self.dist.world_size)
        if isinstance(decision, Exception):
            self.release()
            raise decision
        return decision

    def _drop_leftover(self, arch: Arch) -> None:
        """Remove the checkpoint a kill between record and cleanup left behind, unless
        another job holds the architecture (it is about to remove it itself)."""
        ckpt = self._ckpt(arch)
        if not ckpt.exists():
            return
        if self._claim is None and self.claiming:
            try:
                self._claim = self._try_claim(arch)
            except ConfigError:
                return
            if self._claim is None:
                return
        ckpt.unlink(missing_ok=True)

    def _try_claim(self, arch: Arch) -> claims.Claim | claims.QueueClaim | None:
        if self.queue is not None:
            return self.queue.try_claim(str(arch), arch.id, self.dist.job_id)
        return claims.try_claim(self.folder, arch.id,
                                claims.holder_info(self.dist.job_id, str(arch)))

    @property
    def claiming(self) -> bool:
        return self.config["logging"]["lock"] and self.config["claims"]["backend"] != "none"

    def release(self) -> None:
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    def run(self, archs: list[Arch], stream: Iterator[Arch] | None = None) -> dict[str, int]:
        """Train ``archs``. Architectures claimed by another job are passed over and tried
        once more at the end (that job may have finished them, or died and left them). With
        ``stream`` (``archs`` followed by replacements), skipped and failed designs are
        replaced until ``len(archs)`` are finished or being trained elsewhere, trying at most
        ``model.max_replacements`` more designs (a recipe that fails on every design must
        not walk the whole shard)."""
        counts = {"done": 0, "skipped": 0, "trained": 0, "busy": 0, "failed": 0}
        target = len(archs)
        spare = self.config["model"]["max_replacements"]
        limit = target + (target if spare < 0 else spare)
        busy: list[tuple[int, Arch]] = []
        for index, arch in enumerate(stream if stream is not None else archs):
            if stream is not None and (counts["done"] + counts["trained"] + len(busy) >= target
                                       or index >= limit):
                break
            state = self.process(arch, index, target)
            if state == "busy":
                busy.append((index, arch))
            else:
                counts[state] += 1
        for index, arch in busy:
            counts[self.process(arch, index, target, last_try=True)] += 1
        # the last collective may be a broadcast rank 0 has sent but another rank not yet
        # received: tearing the group down under it aborts the process (gloo)
        barrier()
        return counts

    def process(self, arch: Arch, index: int, total: int, last_try: bool = False) -> str:
        """Claim, then train, resume or pass over one architecture; its final state."""
        label = f"arch {index + 1}/{total} {arch.id}"
        state, detail = self.claim(arch)
        try:
            if state == "todo":
                return self.train_arch(arch, index, total)
            if state == "busy":
                self.say(f"{label} busy: claimed by {detail}; "
                         + ("left to it" if last_try else "coming back to it at the end"))
            else:
                self.say(f"{label} already {state}")
                if self.dist.is_main:
                    self._drop_leftover(arch)
            return state
        finally:
            self.release()

    # -- one architecture ----------------------------------------------------------------
    def _ckpt(self, arch: Arch) -> Path:
        return self.folder / "checkpoints" / f"{arch.id}.pt"

    def say(self, text: str) -> None:
        if self.dist.is_main:
            tqdm.write(f"[anb.train] {text}", file=sys.stdout)
            sys.stdout.flush()

    def _load_state(self, arch: Arch) -> dict[str, Any] | None:
        result: Any = None
        if self.dist.is_main:
            try:
                result = checkpoint.load(self._ckpt(arch), str(arch), self.hash,
                                         self.global_batch, self.dist.world_size)
            except checkpoint.CheckpointError as err:
                result = err
        result = broadcast_object(result, self.dist.world_size)
        if isinstance(result, Exception):
            raise result
        return result

    def _fits(self, arch: Arch) -> tuple[bool, float]:
        model_cfg = self.config["model"]
        verdict: Any = None
        if self.dist.is_main:
            size = getattr(self.loaders, "length", None) or max(self.tv["max_res"],
                                                                 self.tv["min_res"])
            verdict = memcheck.check(
                arch, self.space, self.loaders.num_classes, self.loaders.in_channels,
                model_cfg["mem_check_batch"] or self.tv["batch_size"], size,
                model_cfg["mem_budget_gb"], self.dist.device, self.amp, model_cfg["activation"])
        return broadcast_object(verdict, self.dist.world_size)

    def train_arch(self, arch: Arch, index: int, total: int) -> str:
        try:
            return self._train_arch(arch, index, total)
        except (KeyboardInterrupt, SystemExit, ConfigError, checkpoint.CheckpointError):
            raise
        except Exception as err:
            everywhere = isinstance(err, FloatingPointError) or self.dist.world_size == 1
            failures.record(self.folder, arch, self.dist.job_id, self.dist.rank, err,
                            {"recipe_hash": self.hash, "stream_index": index})
            self.say(f"arch {index + 1}/{total} {arch.id} failed: {type(err).__name__}: "
                     f"{str(err)[:300]}")
            if not everywhere:
                raise
        # Out of the except block: the error, its traceback and the frames that held the failed
        # design's model, optimiser and activations are released, so the memory can be freed.
        free_memory(self.dist.device)
        barrier()
        return "failed"

    def _train_arch(self, arch: Arch, index: int, total: int) -> str:
        started = time.time()
        prov = provenance.base_provenance(arch, self.config, self.hash, index,
                                          self.dist.world_size, self.dist.device)
        prov["recipe"] = recipe_identity(self.config, self.dist.world_size)
        state = self._load_state(arch)
        if state is None:
            fits, peak = self._fits(arch)
            if not fits:
                reason = (f"forward+backward peak {peak:.2f} GB > budget "
                          f"{self.config['model']['mem_budget_gb']} GB")
                self.say(f"arch {index + 1}/{total} {arch.id} skipped: {reason}")
                if self.dist.is_main:
                    provenance.save_skipped(self.folder, arch, reason,
                                            {**prov, "job_ids": [self.dist.job_id]})
                barrier()
                return "skipped"
        mc = self.config["model"]
        torch.manual_seed(seed_of(mc["seed"], index))
        model = build_model(arch, num_classes=self.loaders.num_classes,
                            activation=mc["activation"], dropout=mc["dropout"],
                            drop_path=mc["drop_path"], in_channels=self.loaders.in_channels,
                            space=self.space).to(self.dist.device)
        if self.channels_last:
            # torch's stubs lack Module.to(memory_format=), which torch documents
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        optimizer = recipe.make_optimizer(model, self.config)
        scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        ema = recipe.EMA(model, self.tv["ema_decay"]) if self.tv["ema_decay"] else None
        history: list[dict[str, float]] = []
        train_time, steps_time, job_ids, start_epoch = 0.0, 0.0, [], 0
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])  # moves momentum to the device
            scaler.load_state_dict(state["scaler"])
            if ema is not None:
                ema.model.load_state_dict(state["ema"])
            history, train_time = list(state["history"]), float(state["train_time"])
            steps_time, job_ids = float(state["steps_time"]), list(state["job_ids"])
            start_epoch = int(state["epoch"])
            self.say(f"arch {index + 1}/{total} {arch.id} resuming from epoch {start_epoch}")
        job_ids.append(self.dist.job_id)
        net: nn.Module = model
        if self.dist.world_size > 1:
            net = DistributedDataParallel(
                model, device_ids=[self.dist.device.index] if self.cuda else None)
        loss_fn = recipe.make_loss(self.config)
        peak = recipe.peak_lr(self.config, self.dist.world_size)
        wb = WandbRun(self.config, arch.id, self.hash,
                      {"arch": str(arch), "arch_id": arch.id, "stream_index": index,
                       "job_id": self.dist.job_id, "world_size": self.dist.world_size,
                       "global_batch": self.global_batch, "peak_lr": peak},
                      self.dist.is_main)
        epochs = self.tv["epochs"]
        try:
            for epoch in range(start_epoch, epochs):
                epoch_start = time.time()
                # dropout / drop-path randomness per (arch, epoch, rank): a resumed epoch
                # replays exactly what an uninterrupted run would have done
                torch.manual_seed(seed_of(mc["seed"], index, epoch, self.dist.rank))
                res = recipe.resolution(epoch, self.tv)
                stats = self._train_epoch(net, optimizer, scaler, loss_fn, epoch, res, peak,
                                          f"{index + 1}/{total} e{epoch}", ema)
                if not math.isfinite(stats["train_loss"]):  # all-reduced: every rank sees it
                    raise FloatingPointError(f"training loss is {stats['train_loss']} in epoch "
                                             f"{epoch}")
                steps_time += stats.pop("seconds")
                metrics: dict[str, float] = {"epoch": epoch, **stats, "resolution": res}
                if epoch >= epochs - self.tv["eval_epochs"] or self.tv["curve"]:
                    val_start = time.time()
                    val = self.evaluate(ema.model if ema is not None else net, loss_fn)
                    history.append({"epoch": epoch, **val})
                    metrics.update(val)
                    metrics["val_seconds"] = round(time.time() - val_start, 3)
                metrics["epoch_seconds"] = round(time.time() - epoch_start, 3)
                train_time += time.time() - epoch_start
                metrics.update(train_time=round(train_time, 3),
                               train_steps_time=round(steps_time, 3))
                if self.dist.is_main:
                    checkpoint.save(self._ckpt(arch), {
                        "arch": str(arch), "recipe_hash": self.hash, "epoch": epoch + 1,
                        "global_batch": self.global_batch, "world_size": self.dist.world_size,
                        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict(), "history": history,
                        **({"ema": ema.model.state_dict()} if ema is not None else {}),
                        "train_time": train_time, "steps_time": steps_time,
                        "job_ids": job_ids})
                    if isinstance(self._claim, claims.QueueClaim) and not self._claim.renew():
                        self.say(f"arch {arch.id}: the queue lease was lost (expired and "
                                 "taken by another job?); finishing this epoch's work anyway")
                wb.log_epoch(metrics)
                self.say(f"arch {index + 1}/{total} {arch.id} epoch {epoch + 1}/{epochs} "
                          + " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k != "epoch"))
                barrier()
        except BaseException:
            wb.abort()
            raise
        record = self._record(arch, history, train_time, steps_time, time.time() - started,
                              job_ids, prov)
        if self.dist.is_main:
            provenance.save_record(self.folder, record, arch, self.space)
            weights = (ema.model if ema is not None else model).state_dict()
            wb.finish(record, weights, self.config["logging"]["log_artifacts"])
            self._ckpt(arch).unlink(missing_ok=True)
            failures.clear(self.folder, arch.id)
            if isinstance(self._claim, claims.QueueClaim):
                self._claim.finish({"record": str(provenance.record_path(self.folder, arch)),
                                    "val_top1": record["metrics"].get("val_top1")})
        self.say(f"arch {index + 1}/{total} {arch.id} finished: "
                  + " ".join(f"{k}={v}" for k, v in record["metrics"].items()))
        del net, model, optimizer, ema
        free_memory(self.dist.device)
        barrier()
        return "trained"

    def _train_epoch(self, net: nn.Module, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler, loss_fn: nn.Module, epoch: int, res: int,
                     peak: float, label: str, ema: recipe.EMA | None = None
                     ) -> dict[str, float]:
        """One epoch; the mean loss (all ranks), last lr, images/s (all ranks), the seconds
        spent waiting for data, and the epoch's training seconds."""
        net.train()
        start = time.time()
        total, count, lr, images, wait = torch.zeros((), device=self.dist.device), 0, 0.0, 0, 0.0
        show = self.dist.is_main and self.config["logging"]["progress"]
        bar = tqdm(total=self.steps, desc=f"train {label} {res}px", leave=False,
                   disable=not show)
        batches = iter(self.loaders.train(epoch, res))
        for step in range(self.steps):
            asked = time.time()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            wait += time.time() - asked
            lr = recipe.lr_at(epoch * self.steps + step, self.steps, self.tv["epochs"], peak,
                              self.opt)
            recipe.set_lr(optimizer, lr)
            loss = train_step(net, optimizer, scaler, loss_fn, x, y, self.amp)
            if ema is not None:
                ema.update(net.module if isinstance(net, DistributedDataParallel) else net)
            total += loss.float()  # stays on the device: no sync per step
            count += 1
            images += len(y)
            bar.update()
        bar.close()
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.time() - start
        summed = all_reduce_sum([float(total), count, images], self.dist.device)
        return {"train_loss": summed[0] / max(1.0, summed[1]), "lr": lr,
                "images_per_s": round(summed[2] / max(seconds, 1e-9), 2),
                "data_wait_s": round(wait, 3), "seconds": seconds}

    @torch.no_grad()
    def evaluate(self, net: nn.Module, loss_fn: nn.Module) -> dict[str, float]:
        """Top-1 / top-5 (%) and loss over the whole validation set, summed over ranks; the
        1-D tasks add macro-F1 (ecg) or mean AUROC (multilabel)."""
        net.eval()
        task = self.config["dataloader"]["task"] if self.space.dims == 1 else "classification"
        top1 = top5 = loss_sum = n = 0.0
        outputs, targets = [], []
        for step, (x, y) in enumerate(self.loaders.val()):
            if self.tv["max_val_steps"] and step >= self.tv["max_val_steps"]:
                break
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.amp):
                logits = net(x).float()
            loss_sum += float(loss_fn(logits, y)) * len(y)
            n += len(y)
            if task == "multilabel":
                outputs.append(torch.sigmoid(logits).cpu().numpy())
            else:
                k = min(5, logits.shape[1])
                hits = logits.topk(k, 1).indices.eq(y[:, None])
                top1 += float(hits[:, 0].sum())
                top5 += float(hits.any(1).sum())
                outputs.append(logits.argmax(1).cpu().numpy())
            targets.append(y.cpu().numpy())
        top1, top5, loss_sum, n = all_reduce_sum([top1, top5, loss_sum, n], self.dist.device)
        out: dict[str, float] = {"val_loss": loss_sum / max(n, 1.0)}
        if task != "multilabel":
            out["val_top1"] = round(100.0 * top1 / max(n, 1.0), 3)
            out["val_top5"] = round(100.0 * top5 / max(n, 1.0), 3)
        if task in ("ecg", "multilabel"):
            gathered = all_gather((np.concatenate(outputs) if outputs else None,
                                   np.concatenate(targets) if targets else None))
            pred = np.concatenate([g[0] for g in gathered if g[0] is not None])
            true = np.concatenate([g[1] for g in gathered if g[1] is not None])
            out.update(task_metric(task, pred, true))
        return out

    def _record(self, arch: Arch, history: list[dict], train_time: float, steps_time: float,
                session_time: float, job_ids: list[str], prov: dict) -> dict[str, Any]:
        """The released dataset's fields: the primary metric (and the rest of its epoch's
        metrics) at its best epoch of the last ``eval_epochs``, ``val_top5`` the best top-5 over
        them, ``train_time`` the wall time of training including validation (the training
        steps alone are ``provenance.train_steps_time``); with ``trainval.curve`` the learning
        curve ``val_top1_epoch_<i>`` of every epoch (1-based)."""
        key = primary_metric(self.config, self.space)
        # the evaluated epochs of the run's end: with a curve the history holds every epoch
        last = sorted(history, key=lambda h: h["epoch"])[-self.tv["eval_epochs"]:]
        best = max(last, key=lambda h: h[key])
        metrics = {k: v for k, v in best.items() if k not in ("epoch", "val_loss")}
        metrics.setdefault("val_top1", None)
        top5 = [h["val_top5"] for h in last if h.get("val_top5") is not None]
        metrics["val_top5"] = max(top5) if top5 else None
        metrics["train_time"] = round(train_time, 3)
        if self.tv["curve"]:
            metrics.update({curve_key(h["epoch"] + 1): h.get("val_top1") for h in history})
        info = provenance.model_info(arch, self.space, self.loaders.num_classes,
                                     self.loaders.in_channels,
                                     getattr(self.loaders, "length", None))
        return provenance.make_record(arch, metrics, info, {
            **prov, "best_epoch": best["epoch"], "val_history": history,
            "session_time": round(session_time, 3), "job_ids": job_ids,
            "train_steps_time": round(steps_time, 3),
            "global_batch": self.global_batch,
            "peak_lr": recipe.peak_lr(self.config, self.dist.world_size),
            "run_id": run_id(arch.id, self.hash, self.config["model"]["seed"]),
            "config": self.config})


def train_step(net: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor, amp: bool) -> torch.Tensor:
    """One optimiser step (fp16 autocast + grad scaling when ``amp``); the detached loss."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = loss_fn(net(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def free_memory(device: torch.device) -> None:
    """Return the last architecture's memory, so the next one's memory check starts clean."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def batch_hint(prov: dict, global_batch: int, world: int) -> str:
    """A hint when a recipe mismatch is a different global batch (another GPU count)."""
    other = prov.get("global_batch")
    if other is None or other == global_batch:
        return ""
    return (f"it was trained at global batch {other} ({prov.get('world_size')} ranks), this "
            f"run has {global_batch} ({world} ranks): run on {prov.get('world_size')} ranks, "
            f"or keep the global batch with --trainval.global_batch {other}; ")


def primary_metric(config: Config, space: SearchSpace) -> str:
    """The metric the best-of-last-epochs choice maximises."""
    task = config["dataloader"]["task"] if space.dims == 1 else "classification"
    return {"classification": "val_top1", "ecg": "val_macro_f1",
            "multilabel": "val_auroc"}[task]


def task_metric(task: str, pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Macro-F1 (%) of class predictions, or mean per-label AUROC (%) of probabilities."""
    from sklearn.metrics import f1_score, roc_auc_score

    if task == "ecg":
        return {"val_macro_f1": round(100.0 * f1_score(true, pred, average="macro"), 3)}
    aucs = [roc_auc_score(true[:, j], pred[:, j]) for j in range(true.shape[1])
            if 0 < true[:, j].sum() < len(true)]
    return {"val_auroc": round(100.0 * float(np.mean(aucs)), 3) if aucs else float("nan")}


def parse_args(argv: Sequence[str] | None) -> tuple[str | None, list[str]]:
    parser = argparse.ArgumentParser(
        prog="anb.collect_accuracy.train", description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Config keys, overridable as --section.key value or --key value:\n" + describe())
    parser.add_argument("--config", help="INI recipe (configs/accuracy/*.ini).")
    args, rest = parser.parse_known_args(argv)
    return args.config, rest


def trainer_space(name: str) -> SearchSpace:
    """The space ``name`` if the trainer has a task for it (the MBConv macro spaces)."""
    space = get_space(name)
    if not isinstance(space, SearchSpace):
        raise ValueError(f"search space {name!r} has no trainer task; anb train builds the "
                         "MBConv macro spaces (anb-mnasnet, anb-seq1d)")
    return space


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for torchrun / ``anb train``; returns the exit status."""
    try:
        config_path, overrides = parse_args(argv)
        config = load_config(config_path, overrides)
        space = trainer_space(config["model"]["space"])
        check_compatible(config, space)
        archs = architectures(config, space)
        check_folder(config["logging"]["folder"], OUTPUT, option=FOLDER_OPTION)
        dist = setup(config)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        config = for_world(config, dist.world_size)
        loaders = make_loaders(config, dist.rank, dist.world_size, dist.device)
        trainer = Trainer(config, dist, loaders, space)
        if trainer.claiming and config["claims"]["backend"] == "flock" \
                and config["claims"]["probe"]:
            claims.probe_global(trainer.folder, dist)
        if dist.is_main:
            prepare_folder(trainer.folder, OUTPUT, option=FOLDER_OPTION)
            atomic_write_text(trainer.folder / f"config-{trainer.hash}.ini", to_ini(config))
        note = recipe.bn_stats_note(trainer.steps * config["trainval"]["epochs"])
        if note:
            trainer.say(f"note: {note}")
        counts = trainer.run(archs, candidates(config, space, archs))
        trainer.say(f"stream complete: {counts}")
        if counts["busy"]:
            trainer.say(f"{counts['busy']} architecture(s) left to the other job(s) holding "
                        "them; rerun this command after those jobs end to make sure")
        return 0
    except (ConfigError, checkpoint.CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        teardown()


if __name__ == "__main__":
    sys.exit(main())
