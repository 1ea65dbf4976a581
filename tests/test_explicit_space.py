"""The search space is explicit: no library function defaults to a concrete space (only the
CLI's options and ``anb.load`` choose one), and fitted models refuse an architecture of a
space other than the one they were fitted on, naming both."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import anb
from anb.records import new_record, records_to_frame
from anb.searchspace.registry import BUILTIN_SPACES, SpaceMismatch, get_space, space_names
from anb.surrogates import FitConfig, TargetConfig, fit_benchmark, prepare
from anb.surrogates.layer_cost import LayerCostModel

PACKAGE = Path(anb.__file__).parent
#: where a default space may be chosen: ``anb.load`` (resolves it from a manifest)
CHOOSERS = {PACKAGE / "__init__.py"}
#: the names a registered space object or name goes by (``ANB_SPACE``, ``SPACE``, ...)
SPACE_OBJECTS = {target.split(":")[1] for target in BUILTIN_SPACES.values()}
SPACE_OBJECTS |= {"DEFAULT_SPACE"}
#: dataclass fields of a file format, where an absent ``space`` means the default space
#: (device configs and protocol fingerprints written before spaces were named)
FORMAT_FIELDS = {"collect_throughput/timing/protocol.py Protocol.space",
                 "collect_throughput/targets/fpga.py FpgaDevice.space"}
SMALL = FitConfig(hole_folds=0, layer_cost_trim=None, per_target={}, default=TargetConfig(
    "xgboost", {"n_estimators": 20, "learning_rate": 0.3, "n_jobs": 1}, 1))


def _is_concrete_space(node: ast.expr) -> bool:
    """A registered space: its object or name constant, ``X.name`` of one, ``get_space(..)``,
    or a string naming a registered space."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in space_names()
    if isinstance(node, ast.Attribute):
        return node.attr in SPACE_OBJECTS or (node.attr == "name"
                                              and _is_concrete_space(node.value))
    if isinstance(node, ast.Name):
        return node.id in SPACE_OBJECTS
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name == "get_space"
    return False


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def concrete_space_defaults(source: str, where: str) -> list[str]:
    """Every parameter (of a function, or a dataclass field) defaulting to a concrete space."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults,
                             strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                      if d is not None]
            name = getattr(node, "name", "<lambda>")
            found += [f"{where}:{node.lineno} {name}({arg.arg}={ast.unparse(default)})"
                      for arg, default in pairs if _is_concrete_space(default)]
        elif isinstance(node, ast.ClassDef) and _is_dataclass(node):
            found += [f"{where}:{field.lineno} {node.name}.{ast.unparse(field.target)} = "
                      f"{ast.unparse(field.value)}"
                      for field in node.body
                      if isinstance(field, ast.AnnAssign) and field.value is not None
                      and _is_concrete_space(field.value)
                      and f"{where} {node.name}.{ast.unparse(field.target)}" not in FORMAT_FIELDS]
    return found


def test_no_library_signature_defaults_to_a_concrete_space():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p not in CHOOSERS)
    assert len(modules) > 100  # the walk sees the whole package
    found = [hit for path in modules
             for hit in concrete_space_defaults(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert found == []


@pytest.mark.parametrize("default", ["ANB_SPACE", "space.ANB_SPACE", "SPACE", "DEFAULT_SPACE",
                                     "'nasbench201'", "ANB_SPACE.name", "get_space('fbnet')"])
def test_the_walk_finds_each_kind_of_concrete_default(default):
    function = f"def f(x, space={default}):\n    pass\n"
    dataclass = f"@dataclass\nclass C:\n    space: object = {default}\n"
    assert len(concrete_space_defaults(function, "m")) == 1
    assert len(concrete_space_defaults(dataclass, "m")) == 1
    assert concrete_space_defaults("def f(x, space=None, name='x'):\n    pass\n", "m") == []


@pytest.fixture(scope="module")
def nb201():
    """NAS-Bench-201 architectures with their analytic MACs (log) as a target."""
    space = get_space("nasbench201")
    choices = space.choices_from_index(np.arange(0, space.size(), 11))
    return space, choices, np.log(space.cost_table(choices).total("macs"))


def fbnet_archs(n: int) -> list:
    """Architectures of another space: FBNet's (each knows its space)."""
    fbnet = get_space("fbnet")
    return fbnet.archs_from_choices(fbnet.choices_from_index(np.arange(n)))


def test_layer_cost_model_keeps_its_space_and_refuses_another(nb201, tmp_path):
    space, choices, y = nb201
    model = LayerCostModel(trim=None).fit(choices, {"t": (y, np.ones(len(y), bool))}, space)
    assert model.space is space
    own = space.archs_from_choices(choices[:4])
    np.testing.assert_array_equal(model.transform(own), model.transform(choices[:4]))
    for call in (model.transform, model.unmeasured_share,
                 lambda archs: model.hole_share(archs, np.ones(6))):
        with pytest.raises(SpaceMismatch, match="'fbnet', but 'nasbench201'"):
            call(fbnet_archs(2))
    with pytest.raises(ValueError, match="nasbench201"):  # a bare array of another shape
        model.transform(get_space("fbnet").choices_from_index([0]))
    model.save(tmp_path / "lc.npz")
    assert LayerCostModel.load(tmp_path / "lc.npz", space).space is space
    with pytest.raises(SpaceMismatch, match="'nasbench201', but 'fbnet'"):
        LayerCostModel.load(tmp_path / "lc.npz", get_space("fbnet"))


def test_fitted_surrogate_keeps_its_space_and_refuses_another(nb201):
    space, choices, y = nb201
    records = [{**new_record(arch, space), "metrics": {"val_top1": float(v)}}
               for arch, v in zip(space.archs_from_choices(choices), y, strict=True)]
    prepared = prepare(records_to_frame(records, space), ["val_top1"], split="random",
                       space=space)
    bench = fit_benchmark(prepared, SMALL, progress=False)
    assert bench.space is space and bench.builder.layer_cost.space is space
    assert len(bench.query(space.archs_from_choices(choices[:3]))) == 3
    fbnet = get_space("fbnet")
    for other in (fbnet_archs(2), [new_record(a, fbnet) for a in fbnet_archs(2)]):
        with pytest.raises(SpaceMismatch, match="'fbnet', but 'nasbench201'"):
            bench.query(other)
