"""Accuracy collection: train sampled architectures with the proxified recipe, log, export.

Modules (one job each): ``config`` (sectioned INI + command-line overrides), ``recipe``
(optimiser, lr and resolution schedules, loss), ``data`` / ``imagefolder`` / ``ffcv_io``
(loaders behind one interface), ``distributed`` (launcher env, process group), ``checkpoint``
(atomic per-epoch state), ``provenance`` (records), ``wandb_log``, ``wandb_offline`` (reads
offline run folders), ``memcheck``, ``export``, ``train`` (the torchrun entry point) and
``cli`` (``anb train``, ``anb export``, ``anb write-ffcv``).
"""
