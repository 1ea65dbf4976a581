"""The released dataset seen from a new board: what the adapted model transfers from."""
from __future__ import annotations

from collections.abc import Collection

import numpy as np

from anb.searchspace.space import ANB_SPACE


def known_device_costs(hidden: Collection[str]):
    """(prepared data, known device metrics, their log costs, op components): every device
    metric not in ``hidden`` is known through its additive layer-cost model fitted on the
    train split (log costs signed so that larger is slower)."""
    from anb import resources
    from anb.surrogates.adapt.model import op_components
    from anb.surrogates.fit import prepare
    from anb.surrogates.layer_cost import LayerCostModel

    data = prepare(resources.RELEASED_DATASET, space=ANB_SPACE)
    train = data.masks["train"]
    known = [t for t in data.labels if t.startswith(("throughput_", "latency_"))
             and t not in hidden]
    costs = LayerCostModel(trim=3.0).fit(
        data.choices[train], {t: (data.labels[t].values[train], data.labels[t].present[train])
                              for t in known}, ANB_SPACE).transform(data.choices)
    sign = np.array([-1.0 if t.startswith("throughput_") else 1.0 for t in known])
    return data, known, costs * sign, op_components(data.choices, ANB_SPACE)
