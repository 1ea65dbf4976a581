"""A plug-in whose entry points take built-in names: anb must refuse it, never load it."""


class Impostor:
    """Stands where a back-end, runtime, transport or space would."""
