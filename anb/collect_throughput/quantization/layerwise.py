"""Quantization effect layer by layer: where a quantized network departs from its float one.

For each architecture (a network fitted to the shipped digits, see
:func:`anb.collect_throughput.timing.digits.fit_digits`): run the float ONNX model with every
layer's output exposed in onnxruntime fp32, run the quantized network on the same inputs with every
layer's output exposed, and compare tensor by tensor in graph order: cosine similarity, SQNR
(dB, cumulative error up to that layer), SQNR drop (the layer's SQNR minus its inputs' lowest:
the error the layer itself adds) and max abs error. Quantized paths (``path``):

- ``cpu-int8``: the ``cpu-int8`` device's onnxruntime static int8 QDQ, uint8 activations and
  per-channel int8 weights (``quantize.quantize_int8``, scheme ``u8s8``);
- ``dpu``: the DPU scheme (per-tensor symmetric power-of-two scales);
- a Qualcomm device config (``snpe-dsp``...): the DLC built and quantized by the host stages,
  run on the board by ``snpe-net-run --debug`` on the same NHWC raw inputs; every layer's raw
  output pulled back and turned NCHW.

A trained model (``--weights`` or a user's ``--onnx``) on real images goes through
:func:`model_report`: the same comparison on the CPU paths, per-layer times joined from the
device's profile (:mod:`.layer_times`; Qualcomm: ``snpe-diagview`` of the debug run) and a
keep-float mixed-precision sweep (:mod:`.mixed_precision`).

Per model ``<out>/<arch_id>/layers.csv`` and ``layers.html`` (plotly, self-contained) with the
layers below the thresholds and the ``worst`` lowest-SQNR ones flagged, ``summary.json``; across
models ``<out>/by_layer_type.csv`` / ``.html`` (which layer types lose most) and
``<out>/summary.json``.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.collect_throughput.backends.int8_quantize import cosine, sqnr_db
from anb.collect_throughput.defaults import COS_THRESHOLD, SQNR_THRESHOLD_DB
from anb.collect_throughput.quantization.layer_times import join_times
from anb.collect_throughput.timing.digits import digits_images, fit_digits, top1
from anb.io import atomic_write, atomic_write_json
from anb.outputs import Kind, has_files
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.space import ANB_SPACE
from anb.version import __version__

CPU_PATHS = {"cpu-int8": "u8s8", "dpu": "dpu"}
_QDQ = ("QuantizeLinear", "DequantizeLinear")


def graph_layers(model: Any) -> list[dict]:
    """Layers of an ONNX graph in order (Q/DQ pairs are not layers): order, node, op_type,
    inputs, outputs, and per output the tensor holding its value as the network sees it (the
    dequantized one after a QuantizeLinear/DequantizeLinear pair)."""
    nodes = list(model.graph.node)
    q_of = {n.input[0]: n.output[0] for n in nodes if n.op_type == "QuantizeLinear"}
    dq_of = {n.input[0]: n.output[0] for n in nodes if n.op_type == "DequantizeLinear"}
    layers: list[dict] = []
    for node in nodes:
        if node.op_type in _QDQ:
            continue
        seen = {t: dq_of.get(q_of[t], t) if t in q_of else t for t in node.output}
        layers.append({"order": len(layers), "node": node.name, "op_type": node.op_type,
                       "inputs": list(node.input), "outputs": list(node.output), "seen": seen})
    return layers


def run_every_layer(path: str | Path, images: np.ndarray) -> dict[str, np.ndarray]:
    """Every layer output of an ONNX model over ``images`` (NCHW; one image at a time when the
    model's batch is fixed), keyed by the float tensor name (see :func:`graph_layers`)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    seen = {t: v for layer in graph_layers(model) for t, v in layer["seen"].items()}
    present = {o.name for o in model.graph.output}
    for name in dict.fromkeys(seen.values()):
        if name not in present:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    step = 1 if batch_dim == 1 else len(images)
    feed = model.graph.input[0].name
    runs = [dict(zip(names, session.run(None, {feed: images[i:i + step]}), strict=True))
            for i in range(0, len(images), step)]
    return {t: np.concatenate([r[v] for r in runs]) for t, v in seen.items()}


def by_node(source: list[dict], target: list[dict], acts: dict[str, np.ndarray],
            ) -> dict[str, np.ndarray]:
    """Re-key ``acts`` (outputs of the ``source`` graph) to the ``target`` graph's tensor names:
    the same name where the target has it (a quantizer that fuses Conv+Relu keeps the Relu's
    output name on the Conv), else through node name and output position (quantizers may
    rename tensors, not nodes)."""
    names = {layer["node"]: layer["outputs"] for layer in target}
    tensors = {t for layer in target for t in layer["outputs"]}
    out = {}
    for layer in source:
        for i, tensor in enumerate(layer["outputs"]):
            if tensor in acts and tensor in tensors:
                out[tensor] = acts[tensor]
            elif tensor in acts and i < len(names.get(layer["node"], ())):
                out[names[layer["node"]][i]] = acts[tensor]
    return out


def compare_layers(layers: list[dict], reference: dict[str, np.ndarray],
                   candidate: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per layer output present in both (graph order); see module docstring. A layer
    whose input the quantized network never holds (fused into the layer, e.g. Conv+Relu) has
    its SQNR drop measured from that input's own inputs."""
    rows: list[dict] = []
    sqnr_of: dict[str, float] = {}
    producer = {t: layer for layer in layers for t in layer["outputs"]}

    def input_sqnr(tensor: str) -> list[float]:
        if tensor in sqnr_of:
            return [sqnr_of[tensor]]
        fused = producer.get(tensor)
        return [s for t in fused["inputs"] for s in input_sqnr(t)] if fused else []

    for layer in layers:
        for tensor in layer["outputs"]:
            if tensor not in reference or tensor not in candidate:
                continue
            ref, got = reference[tensor], candidate[tensor]
            if ref.shape != got.shape:
                raise ValueError(f"layer output {tensor!r}: reference shape {ref.shape} vs "
                                 f"quantized {got.shape} (NCHW/NHWC mix-up?)")
            s = sqnr_db(ref, got)
            sqnr_of[tensor] = s
            ins = [s for t in layer["inputs"] for s in input_sqnr(t)]
            rows.append({"order": layer["order"], "tensor": tensor, "node": layer["node"],
                         "op_type": layer["op_type"], "cosine": cosine(ref, got), "sqnr_db": s,
                         "sqnr_drop_db": (min(ins) - s) if ins else np.nan,
                         "max_abs_err": float(np.max(np.abs(ref - got))),
                         "ref_max_abs": float(np.max(np.abs(ref))), "numel": int(ref[0].size)})
    if not rows:
        raise RuntimeError("no layer output of the quantized network matched the float one")
    return pd.DataFrame(rows)


def flag(table: pd.DataFrame, cos_threshold: float, sqnr_threshold: float, worst: int,
         ) -> pd.DataFrame:
    table = table.copy()
    table["below_threshold"] = ((table["cosine"] < cos_threshold)
                                | (table["sqnr_db"] < sqnr_threshold))
    table["worst"] = False
    drops = table["sqnr_drop_db"].fillna(-np.inf)
    table.loc[drops.nlargest(min(worst, len(table))).index, "worst"] = True
    return table


PLOTLY_JS = "plotly.min.js"
PARENT_PLOTLY_JS = f"{os.pardir}/{PLOTLY_JS}"  # the copy one folder up, shared by every model
#: The report folder ``anb quant-layers`` writes (see :mod:`anb.outputs`).
REPORT = Kind("quant-layers", "an anb quant-layers report", has_files("summary.json", PLOTLY_JS),
              replaceable=True)


def write_plotly_js(folder: Path) -> Path:
    """plotly.js once per report folder, so the HTML plots work offline and stay small."""
    from plotly.offline import get_plotlyjs

    target = folder / PLOTLY_JS
    return target if target.exists() else atomic_write(target,
                                                       lambda t: t.write_text(get_plotlyjs()))


def plot_layers(table: pd.DataFrame, path: Path, title: str, cos_threshold: float,
                sqnr_threshold: float, plotly_js: str = PARENT_PLOTLY_JS) -> Path:
    """Interactive per-layer plot (SQNR, SQNR drop, cosine; hover names the layer)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    hover = [f"{r.tensor}<br>{r.op_type} ({r.node})" for r in table.itertuples()]
    x = np.arange(len(table))
    panels = [("sqnr_db", "SQNR vs float (dB)"), ("sqnr_drop_db", "SQNR drop at the layer (dB)"),
              ("cosine", "cosine similarity")]
    panels += [(c, f"{c} (per run, device profile)") for c in ("time_us", "time_fp32_us")
               if c in table]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[title for _, title in panels])
    for row, (column, _) in enumerate(panels, start=1):
        fig.add_trace(go.Scatter(x=x, y=table[column], mode="lines+markers", name=column,
                                 text=hover, hoverinfo="text+y"), row=row, col=1)
    bad = table[table["worst"] | table["below_threshold"]]
    fig.add_trace(go.Scatter(x=bad.index, y=bad["sqnr_db"], mode="markers", name="flagged",
                             marker={"color": "red", "size": 10, "symbol": "x"},
                             text=[hover[i] for i in bad.index], hoverinfo="text+y"),
                  row=1, col=1)
    fig.add_hline(y=sqnr_threshold, line_dash="dash", line_color="red", row=1, col=1)
    fig.add_hline(y=cos_threshold, line_dash="dash", line_color="red", row=3, col=1)
    fig.update_layout(title=title, height=300 * len(panels), showlegend=True)
    return atomic_write(path, lambda tmp: fig.write_html(str(tmp), include_plotlyjs=plotly_js))


def by_layer_type(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Across models: per op type, how much SQNR its layers lose and how often they are flagged."""
    frame = pd.concat([t.assign(arch_id=a) for a, t in tables.items()], ignore_index=True)
    out = frame.groupby("op_type").agg(
        layers=("tensor", "size"), models=("arch_id", "nunique"),
        mean_sqnr_drop_db=("sqnr_drop_db", "mean"), max_sqnr_drop_db=("sqnr_drop_db", "max"),
        median_sqnr_db=("sqnr_db", "median"), min_cosine=("cosine", "min"),
        flagged=("worst", "sum"), below_threshold=("below_threshold", "sum"))
    return out.sort_values("mean_sqnr_drop_db", ascending=False).reset_index()


def _cpu_path(model: Any, scheme: str, resolution: int, calibration: np.ndarray,
              images: np.ndarray, tmp: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    from anb.collect_throughput.backends.int8_quantize import preprocess_float, quantize_int8
    from anb.searchspace.onnx_export import export_onnx

    raw = export_onnx(model, tmp / "float_raw.onnx", resolution=resolution)
    float_path = preprocess_float(raw, tmp / "float.onnx")
    quant_path = quantize_int8(raw, tmp / "quant.onnx", calibration, scheme=scheme)
    import onnx

    return float_path, quant_path, by_node(graph_layers(onnx.load(str(quant_path))),
                                           graph_layers(onnx.load(str(float_path))),
                                           run_every_layer(quant_path, images))


def _device_path(arch: Arch, model: Any, device_name: str, calibration: np.ndarray,
                 images: np.ndarray, tmp: Path, transport: Any = None,
                 ) -> tuple[Path, pd.DataFrame, dict[str, np.ndarray]]:
    """The float ONNX, the per-layer times of the debug run (``snpe-diagview``: ``name``,
    ``op_type``, ``time_us``) and every layer's output pulled from the board."""
    import onnx

    from anb.collect_throughput.targets.qualcomm import host
    from anb.collect_throughput.targets.qualcomm.config import load_qualcomm_device
    from anb.collect_throughput.targets.qualcomm.device import DeviceStages, open_device_transport
    from anb.collect_throughput.targets.qualcomm.stages import build_dlc

    device = load_qualcomm_device(device_name)
    if device.resolution != images.shape[-1]:
        raise ValueError(f"device {device.name} runs {device.resolution} px but the report's "
                         f"resolution is {images.shape[-1]}; pass --resolution "
                         f"{device.resolution} or a config at the report's resolution")
    dlc, onnx_path = build_dlc(arch, device, tmp / "host", calibration, model=model)
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path))).graph
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
              for vi in list(graph.value_info) + list(graph.output)}
    stages = DeviceStages(device, transport or open_device_transport(device), tag=arch.id)
    try:
        remote_model, listing, _ = stages.prepare(dlc, host.write_raw_inputs(images, tmp / "in"))
        stages.net_run(remote_model, listing, debug=True)
        per_input = [stages.pull_outputs(shapes, i, tmp / f"out{i}") for i in range(len(images))]
        _, diag = stages.layer_times(tmp / "diag")
    finally:
        stages.cleanup()
    outputs = {t: np.concatenate([p[t] for p in per_input]) for t in per_input[0]
               if all(t in p for p in per_input)}
    times = diag.rename(columns={"layer": "name", "type": "op_type"})
    return onnx_path, times[["name", "op_type", "time_us"]], outputs


def layer_report(arch: Arch | str, path: str, out: str | Path, resolution: int = 32,
                 calibration: int = 64, images: int = 16, cos_threshold: float = COS_THRESHOLD,
                 sqnr_threshold: float = SQNR_THRESHOLD_DB, worst: int = 5, seed: int = 0,
                 transport: Any = None) -> tuple[dict, pd.DataFrame]:
    """The report of one architecture under one quantized ``path`` (see module docstring)."""
    import onnx

    arch = as_arch(arch, ANB_SPACE)
    model = fit_digits(arch, resolution, seed)
    x_train, _ = digits_images(resolution, "train")
    x_test, y_test = digits_images(resolution, "test")
    x = x_test[:images]
    with tempfile.TemporaryDirectory(prefix="anb-layerwise-") as tmp_name:
        tmp = Path(tmp_name)
        diag = pd.DataFrame()
        if path in CPU_PATHS:
            float_path, _, quantized = _cpu_path(model, CPU_PATHS[path], resolution,
                                                 x_train[:calibration], x, tmp)
        else:
            float_path, diag, quantized = _device_path(arch, model, path,
                                                       x_train[:calibration], x, tmp, transport)
        layers = graph_layers(onnx.load(str(float_path)))
        reference = run_every_layer(float_path, x)
    table = flag(compare_layers(layers, reference, quantized), cos_threshold, sqnr_threshold,
                 worst)
    target = Path(out) / arch.id
    target.mkdir(parents=True, exist_ok=True)
    write_plotly_js(Path(out))
    if len(diag):  # the board's per-layer times (snpe-diagview) of the debug run
        table, diag = join_times(table, layers, diag, "time_us")
        atomic_write(target / "nodes.csv", lambda t: diag.to_csv(t, index=False))
    logits_ref, logits_q = reference.get("logits"), quantized.get("logits")
    summary = {"anb_version": __version__, "arch": str(arch), "arch_id": arch.id, "path": path,
               "resolution": resolution,
               "images": int(len(x)), "calibration_images": int(min(calibration, len(x_train))),
               "layers": int(len(table)), "cos_threshold": cos_threshold,
               "sqnr_threshold_db": sqnr_threshold,
               "worst_layers": table.loc[table["worst"], "tensor"].tolist(),
               "layers_below_threshold": table.loc[table["below_threshold"], "tensor"].tolist(),
               "node_time_us": float(diag["time_us"].sum()) if len(diag) else None}
    if logits_ref is not None and logits_q is not None:
        summary.update(float_top1=top1(logits_ref, y_test[:images]),
                       quantized_top1=top1(logits_q, y_test[:images]),
                       logits_sqnr_db=sqnr_db(logits_ref, logits_q))
    atomic_write(target / "layers.csv", lambda t: table.to_csv(t, index=False))
    plot_layers(table, target / "layers.html", f"{arch} on {path}", cos_threshold,
                sqnr_threshold)
    atomic_write_json(target / "summary.json", summary)
    return summary, table


def layerwise(archs: Sequence[Arch | str], path: str, out: str | Path, **options: Any,
              ) -> dict:
    """:func:`layer_report` for every architecture (one failure is recorded, the rest go on)
    and the summary across models by layer type."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tables, summaries, failed = {}, [], {}
    for arch in archs:
        arch = as_arch(arch, ANB_SPACE)
        try:
            summary, table = layer_report(arch, path, out, **options)
        except (ValueError, RuntimeError, FileNotFoundError) as err:
            failed[arch.id] = f"{type(err).__name__}: {err}"
            continue
        tables[arch.id] = table
        summaries.append(summary)
    return write_summary(out, path, tables, summaries, failed)


def write_summary(out: Path, path: str, tables: dict[str, pd.DataFrame], summaries: list[dict],
                  failed: dict[str, str]) -> dict:
    """``out/summary.json`` (and ``by_layer_type.csv``/``.html``) across the models."""
    import plotly.express as px

    result = {"anb_version": __version__, "path": path, "models": summaries, "failed": failed}
    if tables:
        types = by_layer_type(tables)
        atomic_write(out / "by_layer_type.csv", lambda t: types.to_csv(t, index=False))
        fig = px.bar(types, x="op_type", y="mean_sqnr_drop_db", hover_data=list(types.columns),
                     title=f"SQNR lost per layer type on {path} ({len(tables)} models)")
        atomic_write(out / "by_layer_type.html",
                     lambda t: fig.write_html(str(t), include_plotlyjs=PLOTLY_JS))
        result["by_layer_type"] = types.to_dict(orient="records")
    atomic_write_json(out / "summary.json", result)
    return result


def _device_times(path: str, quant_path: Path, float_path: Path, image: np.ndarray,
                  layers: list[dict], table: pd.DataFrame,
                  ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """``table`` with per-layer times where ``path`` gives them (``cpu-int8``: onnxruntime's
    profile of the int8 and the fp32 model), the timed nodes and the totals."""
    from anb.collect_throughput.quantization.layer_times import ort_node_times

    if path != "cpu-int8":
        return table, pd.DataFrame(), {"layer_times": f"none ({path} is not run on this host)"}
    frames = []
    totals: dict[str, Any] = {"layer_times": "onnxruntime profiling (1 thread, ORT_ENABLE_ALL)"}
    for model, column, precision in ((quant_path, "time_us", "int8"),
                                     (float_path, "time_fp32_us", "fp32")):
        nodes, total = ort_node_times(model, image)
        table, nodes = join_times(table, layers, nodes, column)
        frames.append(nodes.assign(precision=precision))
        totals.update({f"{precision}_run_us": total,
                       f"{precision}_node_time_us": float(nodes["time_us"].sum()),
                       f"{precision}_glue_nodes": int((nodes["matched"] == "glue").sum())})
    return table, pd.concat(frames, ignore_index=True), totals


def model_report(model: Any, path: str, out: str | Path, images_dir: str | Path,
                 calibration: int = 64, images: int = 16, eval_images: int = 200,
                 cos_threshold: float = COS_THRESHOLD,
                 sqnr_threshold: float = SQNR_THRESHOLD_DB, worst: int = 5,
                 keep_float: Sequence[int] = (), seed: int = 0, latency_budget_s: float = 2.0,
                 ) -> tuple[dict, pd.DataFrame]:
    """The report of a trained model (a :class:`.real_model.RealModel`) on real images under
    the CPU path ``path``: per-layer comparison on ``images`` of the folder, per-layer times
    (:func:`_device_times`), and for each K in ``keep_float`` the mixed-precision model with
    the K worst layers float (:func:`.mixed_precision.sweep`, on ``eval_images``)."""
    import onnx

    from anb.collect_throughput.backends.int8_quantize import preprocess_float, quantize_int8
    from anb.collect_throughput.quantization.mixed_precision import sweep
    from anb.collect_throughput.quantization.real_model import folder_images

    if path not in CPU_PATHS:
        raise ValueError(f"path={path!r}: a trained model is checked on {sorted(CPU_PATHS)} "
                         "(the Qualcomm path runs search-space networks from ARCHS only)")
    x_calib, x_eval, labels = folder_images(images_dir, calibration, eval_images,
                                            model.resolution, seed)
    x = x_eval[:images]
    target = Path(out) / model.model_id
    target.mkdir(parents=True, exist_ok=True)
    write_plotly_js(Path(out))
    float_path = preprocess_float(model.path, target / "float.onnx")
    quant_path = quantize_int8(float_path, target / "int8.onnx", x_calib, CPU_PATHS[path])
    float_layers = graph_layers(onnx.load(str(float_path)))
    quantized = by_node(graph_layers(onnx.load(str(quant_path))), float_layers,
                        run_every_layer(quant_path, x))
    table = flag(compare_layers(float_layers, run_every_layer(float_path, x), quantized),
                 cos_threshold, sqnr_threshold, worst)
    table, nodes, times = _device_times(path, quant_path, float_path, x[:1], float_layers, table)
    mixed = sweep(float_path, quant_path, float_layers, table, keep_float, x_calib, x_eval,
                  labels, CPU_PATHS[path], target, latency_budget_s)
    output = onnx.load(str(float_path)).graph.output[0].name
    rows = json.loads(mixed.to_json(orient="records"))  # NaN/inf -> null, numpy -> plain
    fp32, int8 = rows[0], rows[1]
    summary = {"anb_version": __version__, "model": model.source, "model_id": model.model_id,
               "arch": model.arch, "path": path, "scheme": CPU_PATHS[path],
               "resolution": model.resolution, "images_dir": str(images_dir),
               "labelled": labels is not None, "images": int(len(x)),
               "eval_images": int(len(x_eval)), "calibration_images": int(len(x_calib)),
               "layers": int(len(table)), "cos_threshold": cos_threshold,
               "sqnr_threshold_db": sqnr_threshold, "output": output,
               "worst_layers": table.loc[table["worst"], "tensor"].tolist(),
               "layers_below_threshold": table.loc[table["below_threshold"], "tensor"].tolist(),
               "median_layer_cosine": float(table["cosine"].median()),
               "float_top1": fp32["top1"], "quantized_top1": int8["top1"],
               "agreement": int8["agreement"], "logits_cosine": int8["logits_cosine"],
               "logits_sqnr_db": int8["logits_sqnr_db"], **times,
               "mixed_precision": rows}
    atomic_write(target / "layers.csv", lambda t: table.to_csv(t, index=False))
    if len(nodes):
        atomic_write(target / "nodes.csv", lambda t: nodes.to_csv(t, index=False))
    atomic_write(target / "mixed_precision.csv", lambda t: mixed.to_csv(t, index=False))
    plot_layers(table, target / "layers.html", f"{model.source} on {path}", cos_threshold,
                sqnr_threshold)
    atomic_write_json(target / "summary.json", summary)
    return summary, table
