"""Adapting a fitted benchmark to a new device from a few measurements: the adapted model
(:mod:`.model`), its parts (:mod:`.proxy`, :mod:`.embed`, :mod:`.board_prior`,
:mod:`.anchored`), how the predicting part is chosen (:mod:`.choice`, :mod:`.hold`), the known
devices it transfers from (:mod:`.base`), which architectures to measure (:mod:`.select`), the
Python front door (:mod:`.api`) and the ``anb adapt`` command (:mod:`.cli`)."""
