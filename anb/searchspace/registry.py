"""Search spaces by name: the built-in ones and third-party plug-ins.

A plug-in package registers a space under the entry-point group ``anb.spaces``; the entry
point names a :class:`~anb.searchspace.base.Space` instance (or a callable returning one)::

    [project.entry-points."anb.spaces"]
    my-space = "my_package.space:SPACE"

Built-in spaces are imported only when first asked for.
"""
from __future__ import annotations

from functools import cache

from anb.plugins import import_target, installed_targets
from anb.searchspace.base import Space, SpaceMismatch, check_same_space

__all__ = ["BUILTIN_SPACES", "DEFAULT_SPACE", "ENTRY_POINT_GROUP", "SpaceMismatch",
           "check_same_space", "get_space", "resolve_space", "space_names"]

ENTRY_POINT_GROUP = "anb.spaces"
DEFAULT_SPACE = "anb-mnasnet"

#: name -> "module:attribute" of the spaces anb ships
BUILTIN_SPACES = {
    "anb-mnasnet": "anb.searchspace.space:ANB_SPACE",
    "anb-seq1d": "anb.searchspace.space:SEQ1D_SPACE",
    "nasbench201": "anb.searchspace.nasbench201:SPACE",
    "fbnet": "anb.searchspace.fbnet:SPACE",
    "ofa-mbv3": "anb.searchspace.ofa_mbv3:SPACE",
}


def _load(target: str, where: str) -> Space:
    obj = import_target(target)
    space = obj() if callable(obj) and not isinstance(obj, Space) else obj
    if not isinstance(space, Space):
        raise TypeError(f"{where} {target!r} gives {type(space).__name__}, not an anb Space")
    return space


def _plugins() -> dict[str, str]:
    return installed_targets(ENTRY_POINT_GROUP, BUILTIN_SPACES, "search space")


def space_names() -> list[str]:
    """Every space that can be asked for: built-in first, then plug-ins."""
    return list(BUILTIN_SPACES) + sorted(_plugins())


@cache
def get_space(name: str) -> Space:
    """The space registered as ``name``; a ValueError lists the known names."""
    if isinstance(name, Space):
        return name
    plugins = _plugins()  # first: a plug-in clashing with a built-in is refused
    if name in BUILTIN_SPACES:
        return _load(BUILTIN_SPACES[name], "built-in space")
    if name in plugins:
        return _load(plugins[name], f"entry point {ENTRY_POINT_GROUP}:{name}")
    raise ValueError(f"unknown search space {name!r}; known spaces are {space_names()}")


def resolve_space(given: str | Space | None, found: str | None = None,
                  what: str = "the data") -> Space:
    """The space a command works in: ``given`` (``--space``), else the one ``found`` in its
    input, else the default; a ``given`` that differs from ``found`` is refused naming both."""
    name = given.name if isinstance(given, Space) else given
    if name is not None and found is not None:
        check_same_space(name, found, what)
    if isinstance(given, Space):
        return given
    return get_space(name or found or DEFAULT_SPACE)
