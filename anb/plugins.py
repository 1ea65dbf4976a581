"""Named things found by ``module:attribute`` targets: the built-in ones, those added at run time,
and those installed packages declare under an entry-point group::

    [project.entry-points."anb.backends"]
    my-npu = "my_package.npu:NpuBackend"

One :class:`Registry` per kind (search spaces, back-ends, board runtimes, transports, device
configs); targets are imported only when asked for, so listing names imports nothing. An
entry point named like a built-in is refused (:func:`installed_targets`): neither may shadow
the other silently.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from typing import Any


def entry_point_targets(group: str) -> dict[str, str]:
    """``name -> "module:attribute"`` of every installed entry point of ``group`` (read again
    only when ``sys.path`` changed)."""
    return dict(_entry_point_targets(group, tuple(sys.path)))


@cache
def _entry_point_targets(group: str, path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((ep.name, ep.value) for ep in entry_points(group=group))


def installed_targets(group: str, builtin: Mapping[str, str], kind: str) -> dict[str, str]:
    """:func:`entry_point_targets` of ``group``; a ValueError when one is named like a
    built-in ``kind``, naming both."""
    installed = entry_point_targets(group)
    clashes = sorted(installed.keys() & builtin.keys())
    if clashes:
        name = clashes[0]
        raise ValueError(f"entry point {group}:{name} ({installed[name]!r}) has the name of "
                         f"the built-in {kind} {name!r} ({builtin[name]!r}); allowed: a name "
                         f"that is not built in: rename the entry point in the package that "
                         f"declares it, or uninstall that package")
    return installed


def import_target(target: str) -> Any:
    """The object ``"module:attribute"`` names (``attribute`` may be dotted)."""
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"target {target!r} is invalid; allowed: 'module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


class Registry:
    """The ``kind`` things (e.g. ``backend``) by name: ``builtin`` first, then those added with
    :meth:`register`, then the entry points of ``group`` (a built-in name is never replaced:
    registering or installing one is refused)."""

    def __init__(self, kind: str, group: str, builtin: Mapping[str, str]):
        self.kind, self.group = kind, group
        self._builtin = dict(builtin)
        self._added: dict[str, str] = {}

    def register(self, name: str, target: str) -> None:
        """Add ``name`` -> ``"module:attribute"`` for this process (not a built-in name)."""
        if name in self._builtin:
            raise ValueError(f"{self.kind} {name!r} is built in ({self._builtin[name]!r}); "
                             f"allowed: another name for {target!r}")
        self._added[name] = target

    def targets(self) -> dict[str, str]:
        """Every name and its target (built-in, added, installed)."""
        plugins = installed_targets(self.group, self._builtin, self.kind)
        return {**self._builtin, **plugins, **self._added}

    def names(self) -> list[str]:
        return sorted(self.targets())

    def __contains__(self, name: object) -> bool:
        return name in self.targets()

    def __iter__(self):
        return iter(self.names())

    def is_builtin(self, name: str) -> bool:
        return name in self._builtin

    def where(self, name: str) -> str:
        """How ``name`` was registered, for error messages."""
        if name in self._builtin or name in self._added:
            return f"{self.kind} {name!r}"
        return f"entry point {self.group}:{name}"

    def load(self, name: str, field: str | None = None) -> Any:
        """The object registered as ``name``; a ValueError names ``field`` (default: the
        kind) and lists the known names."""
        targets = self.targets()
        if name not in targets:
            raise ValueError(f"{field or self.kind}={name!r} is invalid; allowed: "
                             f"{sorted(targets)} (more install as {self.group!r} entry points)")
        try:
            return import_target(targets[name])
        except (ImportError, AttributeError) as err:
            raise ValueError(f"{self.where(name)} ({targets[name]!r}) cannot be loaded: "
                             f"{type(err).__name__}: {err}") from None
