"""Defaults that commands and library functions of measurement share: each has one home here."""

COS_THRESHOLD = 0.99
"""Quantization reports flag a layer whose output's cosine similarity to the float network's is
below this."""
SQNR_THRESHOLD_DB = 20.0
"""Quantization reports flag a layer whose signal-to-quantization-noise ratio (dB) is below
this."""
QUALITY_IMAGES = 500
"""Images of a labelled folder a quality measurement scores (a class-stratified sample)."""
ANCHOR_EVERY = 500
"""Architectures measured between two anchor sessions."""
