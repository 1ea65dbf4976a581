"""Adapters that put a fitted anb benchmark into researchers' tools: a Syne Tune blackbox
(:mod:`.syne_tune`) and an OptunaHub-style problem (:mod:`.optuna`). Each imports its own
library lazily, and anb's query API only (no torch, no collection code)."""
