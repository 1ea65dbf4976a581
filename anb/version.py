"""The package version, kept in one place: ``anb.__version__``, ``anb --version``, the wheel's
metadata (``pyproject.toml`` reads it from here) and the ``anb_version`` stamp in every artifact
and record anb writes."""
__version__ = "0.2.0"
