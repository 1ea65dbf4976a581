"""anb: build and serve accelerator-aware NAS benchmarks."""
__version__ = "0.1.0"
