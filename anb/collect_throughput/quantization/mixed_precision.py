"""Mixed precision: keep the K layers that lose most in float, quantize the rest, and measure
what that recovers (accuracy against labels, or agreement with fp32 when unlabelled) and what
it costs (latency of the mixed model vs full int8 vs fp32, timed round-robin under anb's
warm-up and stopping rules on one CPU thread).

A layer's rank is the :mod:`.layerwise` ``worst`` ranking (SQNR the layer itself adds); a
layer is its row's node plus the layers fused into it (:func:`.layer_times.row_of_layer`),
so keeping a Relu row float keeps the convolution that feeds it float too.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.collect_throughput.backends.int8_quantize import cosine, quantize_int8, run_model, sqnr_db
from anb.collect_throughput.quantization.layer_times import row_of_layer


def ranked_rows(table: pd.DataFrame) -> list[str]:
    """Row tensors, most SQNR lost at the layer first (the order ``worst`` flags)."""
    drops = table.drop_duplicates("tensor").set_index("tensor")["sqnr_drop_db"]
    return list(drops.fillna(-np.inf).sort_values(ascending=False, kind="stable").index)


def nodes_of_rows(layers: list[dict], table: pd.DataFrame, rows: Sequence[str]) -> list[str]:
    """The float graph's nodes behind ``rows`` (each row's node and the layers fused into it)."""
    charged = row_of_layer(layers, table)
    wanted = set(rows)
    return [node for node, row in charged.items() if row in wanted]


def float_nodes(model) -> set[str]:
    """Nodes of a QDQ ``onnx.ModelProto`` that hold weights and compute in float: none of
    their inputs is a DequantizeLinear of a constant (a quantized weight or bias)."""
    inits = {i.name for i in model.graph.initializer}
    dq_const = {n.output[0] for n in model.graph.node
                if n.op_type == "DequantizeLinear" and n.input[0] in inits}
    return {n.name for n in model.graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and any(i in inits for i in n.input) and not any(i in dq_const for i in n.input)}


def accuracy(logits: np.ndarray, reference: np.ndarray, labels: np.ndarray | None) -> dict:
    """Top-1 (%, when labelled), top-1 agreement with the fp32 logits (%), logits cosine and
    SQNR (dB) against them."""
    out = {"top1": float(np.mean(logits.argmax(1) == labels) * 100)
           if labels is not None else None,
           "agreement": float(np.mean(logits.argmax(1) == reference.argmax(1)) * 100),
           "logits_cosine": cosine(reference, logits), "logits_sqnr_db": sqnr_db(reference,
                                                                                  logits)}
    return out


def latencies_ms(paths: Sequence[Path], image: np.ndarray, budget_s: float) -> list[float]:
    """Trimmed-mean latency (ms) of each model over one image, timed round-robin."""
    from anb.collect_throughput.backends.onnxruntime_backend import ort_session
    from anb.collect_throughput.timing.loop import CpuClock, run_interleaved
    from anb.collect_throughput.timing.protocol import StoppingRule, WarmupRule
    from anb.collect_throughput.timing.stats import trimmed_mean

    sessions = [ort_session(Path(p), 1) for p in paths]
    feeds = [{s.get_inputs()[0].name: image} for s in sessions]
    def step(session: Any, feed: dict) -> Callable[[], None]:
        return lambda: session.run(None, feed)

    steps = [step(s, f) for s, f in zip(sessions, feeds, strict=True)]
    results = run_interleaved(steps, [CpuClock() for _ in steps], WarmupRule(max_seconds=5),
                              StoppingRule(budget_seconds=budget_s, min_rep_seconds=0.01))
    return [trimmed_mean(np.asarray(r.times) / np.asarray(r.drift or 1.0)) * 1e3
            for r in results]


def sweep(float_path: Path, int8_path: Path, layers: list[dict], table: pd.DataFrame,
          keep_float: Sequence[int], calibration: np.ndarray, images: np.ndarray,
          labels: np.ndarray | None, scheme: str, folder: Path, budget_s: float = 2.0,
          ) -> pd.DataFrame:
    """One row per model: fp32, int8 (K = 0) and each K of ``keep_float`` (the mixed models
    saved as ``folder/mixed_k<K>.onnx``): accuracy (:func:`accuracy`), latency and its ratio
    to int8 and fp32, the rows kept float and their nodes."""
    ranked = ranked_rows(table)
    reference = run_model(float_path, images)
    models: list[tuple[str, int | None, Path, list[str], list[str]]] = [
        ("fp32", None, float_path, [], []), ("int8", 0, int8_path, [], [])]
    for k in sorted(set(keep_float) - {0}):
        rows = ranked[:k]
        nodes = nodes_of_rows(layers, table, rows)
        path = quantize_int8(float_path, folder / f"mixed_k{k}.onnx", calibration, scheme,
                             exclude=nodes)
        models.append(("mixed", k, path, rows, nodes))
    times = latencies_ms([m[2] for m in models], images[:1], budget_s)
    out = []
    for (precision, kept, model, rows, nodes), ms in zip(models, times, strict=True):
        out.append({"precision": precision, "keep_float": kept,
                    **accuracy(run_model(model, images), reference, labels),
                    "latency_ms": ms, "float_layers": rows, "float_nodes": nodes,
                    "model": model.name})
    frame = pd.DataFrame(out)
    frame["latency_vs_int8"] = frame["latency_ms"] / times[1]
    frame["latency_vs_fp32"] = frame["latency_ms"] / times[0]
    return frame
