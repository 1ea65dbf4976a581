"""A plug-in may add names, never take a built-in one: ``tests/plugins/anb_clash`` declares
entry points named like a built-in back-end, board runtime, transport and search space; once
it is installed (pip, into a folder of its own, put on ``sys.path``) each registry refuses it,
naming the entry point's target and the built-in's, instead of letting one shadow the other."""
from __future__ import annotations

from pathlib import Path

import pytest

from anb.collect_throughput import registries
from anb.searchspace import registry as spaces
from tests.plugin_helpers import pip_install

PLUGIN = Path(__file__).resolve().parent / "plugins" / "anb_clash"
REMEDY = ("; allowed: a name that is not built in: rename the entry point in the package "
          "that declares it, or uninstall that package")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return pip_install(PLUGIN, tmp_path_factory.mktemp("site"))


@pytest.mark.parametrize("registry, name, builtin", [
    (registries.BACKENDS, "onnxruntime",
     "anb.collect_throughput.backends.onnxruntime_backend:OnnxRuntimeBackend"),
    (registries.RUNTIMES, "resident", "anb.collect_throughput.targets.resident:ResidentBoard"),
    (registries.TRANSPORTS, "ssh", "anb.collect_throughput.transports.ssh:SshTransport"),
])
def test_an_entry_point_named_like_a_built_in_is_refused(site, monkeypatch, registry, name,
                                                         builtin):
    """Bug class: an installed package silently replacing (or silently losing to) a built-in
    back-end, runtime or transport of the same name."""
    assert registry.load(name).__module__ == builtin.split(":")[0]  # before the install
    monkeypatch.syspath_prepend(str(site))
    message = (f"entry point {registry.group}:{name} ('anb_clash:Impostor') has the name of "
               f"the built-in {registry.kind} {name!r} ({builtin!r})" + REMEDY)
    for use in (lambda: registry.load(name), registry.names, lambda: "other" in registry):
        with pytest.raises(ValueError) as err:
            use()
        assert str(err.value) == message


def test_a_space_named_like_a_built_in_is_refused(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    spaces.get_space.cache_clear()  # a space asked for earlier in this process is cached
    message = ("entry point anb.spaces:fbnet ('anb_clash:Impostor') has the name of the "
               "built-in search space 'fbnet' ('anb.searchspace.fbnet:SPACE')" + REMEDY)
    try:
        for use in (lambda: spaces.get_space("fbnet"), spaces.space_names):
            with pytest.raises(ValueError) as err:
                use()
            assert str(err.value) == message
    finally:
        spaces.get_space.cache_clear()


def test_registering_a_built_in_name_is_refused(monkeypatch):
    registry = registries.BACKENDS
    monkeypatch.setattr(registry, "_added", {})
    with pytest.raises(ValueError) as err:
        registry.register("torch", "my_package:Torch")
    assert str(err.value) == ("backend 'torch' is built in ('anb.collect_throughput.backends."
                              "torch_backend:TorchBackend'); allowed: another name for "
                              "'my_package:Torch'")
    assert registry._added == {} and registry.targets()["torch"].endswith(":TorchBackend")


def test_a_registry_loads_dotted_targets_and_names_where_each_came_from():
    """The registry and target parsing on their own (a registry built here, so mutation testing
    reaches its constructor): dotted attributes, where a name came from, bad targets."""
    import json
    import os

    from anb.plugins import Registry, import_target

    registry = Registry("widget", "anb.test-widgets", {"dumps": "json:dumps"})
    registry.register("join", "os:path.join")
    assert list(registry) == ["dumps", "join"]
    assert registry.load("dumps") is json.dumps and registry.load("join") is os.path.join
    assert registry.where("dumps") == "widget 'dumps'" and registry.where("join") == \
        "widget 'join'"
    assert registry.where("other") == "entry point anb.test-widgets:other"
    for target in ("json", ":dumps", "json:"):
        with pytest.raises(ValueError) as err:
            import_target(target)
        assert str(err.value) == f"target {target!r} is invalid; allowed: 'module:attribute'"
    with pytest.raises(AttributeError):  # the attribute is everything after the first colon
        import_target("json:dumps:x")
