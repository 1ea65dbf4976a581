"""Per-layer time joined with the per-layer comparison of :mod:`.layerwise`.

The device's own per-node times (onnxruntime's profiler for the CPU paths, SNPE's diagnostic
log through ``snpe-diagview`` for Qualcomm) name nodes of the graph the runtime executed: fused
and renamed (``<node>_token_7``, ``<tensor>_nchwc``), plus glue the runtime inserted (layout
reorders, the input's QuantizeLinear). Each timed node is charged to one row of the layer
table:

1. its name, or its longest prefix ending before a ``_``, names a layer node or a layer
   output of the float graph -> that layer;
2. a layer without a row of its own (fused into a later layer, e.g. Conv before Relu in
   ``u8s8``) -> the row of its nearest consumer that has one (:func:`row_of_layer`);
3. glue that names no layer -> the next timed node's row (the layer it prepares), or, at the
   end of a run, the previous one's.

So every timed node lands on a row and the rows' times add up to the profiled node total.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def row_of_layer(layers: list[dict], table: pd.DataFrame) -> dict[str, str]:
    """Layer node name -> the ``tensor`` of the row it is charged to (its own first row, else
    that of its nearest consumer with a row, else the last row before it)."""
    own: dict[str, str] = {}
    for row in table.itertuples():
        own.setdefault(str(row.node), str(row.tensor))
    consumers: dict[str, list[dict]] = {}
    for layer in layers:
        for tensor in layer["inputs"]:
            consumers.setdefault(tensor, []).append(layer)
    out: dict[str, str] = {}
    previous = str(table["tensor"].iloc[0])
    for layer in layers:
        if layer["node"] in own:
            out[layer["node"]] = previous = own[layer["node"]]
            continue
        queue, seen, found = list(layer["outputs"]), set(), None
        while queue and found is None:
            tensor = queue.pop(0)
            for consumer in consumers.get(tensor, []):
                if consumer["node"] in own:
                    found = own[consumer["node"]]
                    break
                if consumer["node"] not in seen:
                    seen.add(consumer["node"])
                    queue.extend(consumer["outputs"])
        out[layer["node"]] = found or previous
    return out


def match_layer(name: str, names: dict[str, str]) -> str | None:
    """The layer node ``name`` is (see module docstring, rule 1); ``names`` maps layer node
    names and layer output tensors to layer node names."""
    if name in names:
        return names[name]
    cut = name.rfind("_")
    while cut > 0:
        if name[:cut] in names:
            return names[name[:cut]]
        cut = name.rfind("_", 0, cut)
    return None


def join_times(table: pd.DataFrame, layers: list[dict], nodes: pd.DataFrame, column: str,
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` with ``column`` (us per run, summed over the nodes charged to each row) and
    ``<column>_nodes`` (how many); ``nodes`` (``name``, ``time_us``, in execution order) with
    the row each was charged to (``tensor``) and how (``matched``: ``layer`` or ``glue``)."""
    names = {layer["node"]: layer["node"] for layer in layers}
    names.update({t: layer["node"] for layer in layers for t in layer["outputs"]})
    row_of = row_of_layer(layers, table)
    direct = [row_of.get(match_layer(str(n), names) or "") for n in nodes["name"]]
    charged: list[str | None] = list(direct)
    following = None
    for i in range(len(charged) - 1, -1, -1):  # glue -> the next timed node's row
        charged[i] = following = charged[i] or following
    last = next((c for c in charged if c), None)
    for i, value in enumerate(charged):  # glue after the last layer -> the previous row
        charged[i] = last = value or last
    nodes = nodes.assign(tensor=pd.Series(charged, index=nodes.index, dtype=object),
                         matched=["layer" if d else "glue" for d in direct])
    per_row = nodes.groupby("tensor")["time_us"].agg(["sum", "size"])
    table = table.copy()
    first = ~table["tensor"].duplicated()  # a row's time is counted once per tensor
    table[column] = np.where(first, table["tensor"].map(per_row["sum"]).fillna(0.0), 0.0)
    table[f"{column}_nodes"] = np.where(first, table["tensor"].map(per_row["size"]).fillna(0),
                                        0).astype(int)
    return table, nodes


def ort_node_times(path: str | Path, image: np.ndarray, runs: int = 20,
                   ) -> tuple[pd.DataFrame, float]:
    """onnxruntime's profile of ``path`` as the CPU devices run it (one thread, sequential,
    full graph optimisation): per executed node ``name``, ``op_type`` and mean ``time_us`` per
    run, in execution order, and the mean ``model_run`` time (us). One warm-up run first,
    left out of both."""
    import onnxruntime as ort

    if runs < 1:
        raise ValueError(f"runs={runs} is invalid; allowed: an integer >= 1")
    with tempfile.TemporaryDirectory(prefix="anb-profile-") as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: image}
        for _ in range(runs + 1):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    run_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(run_spans) != runs + 1:
        raise RuntimeError(f"onnxruntime's profile of {path} holds {len(run_spans)} runs, "
                           f"expected {runs + 1}")
    start = run_spans[1][0]
    kernels = [e for e in events if e.get("cat") == "Node" and e["ts"] >= start
               and e["name"].endswith("_kernel_time")]
    frame = pd.DataFrame({"name": [e["name"][:-len("_kernel_time")] for e in kernels],
                          "op_type": [e.get("args", {}).get("op_name", "") for e in kernels],
                          "time_us": [float(e["dur"]) for e in kernels],
                          "ts": [e["ts"] for e in kernels]})
    order = frame.groupby("name", sort=False)["ts"].min().sort_values().index
    per_node = frame.groupby("name", sort=False).agg(op_type=("op_type", "first"),
                                                     time_us=("time_us", "sum"))
    per_node["time_us"] /= runs
    total = float(np.mean([end - begin for begin, end in run_spans[1:]]))
    return per_node.loc[order].reset_index(), total
