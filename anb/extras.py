"""Optional dependencies: ``pip install anb`` queries and searches the surrogates; collection
pulls its own extras (``pip install 'anb[measure]'``...). A module that is missing gives one
line naming the extra that installs it, not a traceback."""
from __future__ import annotations

import importlib
from types import ModuleType

#: The extra that installs each optional top-level module (pyproject.toml declares them).
EXTRA = {
    "xgboost": "fit", "lightgbm": "fit", "sklearn": "fit", "optuna": "fit", "pyarrow": "fit",
    "torch": "measure", "onnx": "measure", "onnxruntime": "measure", "plotly": "measure",
    "wandb": "train", "torchvision": "full-recipe", "torch_xla": "tpu", "psycopg": "postgres",
    "ffcv": "ffcv", "pymoo": "search", "matplotlib": "search", "openvino": "openvino",
    "tvm": "tvm", "syne_tune": "syne-tune", "optunahub": "optunahub", "PIL": "measure",
}


class MissingExtra(ImportError):
    """An optional module is not installed; the message names the extra to install."""


def message(module: str, extra: str | None = None, what: str | None = None) -> str:
    """``"<what> needs <module>, which is not installed: pip install 'anb[<extra>]'"``."""
    root = module.split(".")[0]
    extra = extra or EXTRA.get(root, "all")
    return (f"{what or 'this'} needs {root}, which is not installed: "
            f"pip install 'anb[{extra}]' (or 'anb[all]' for everything)")


def require(module: str, extra: str | None = None, what: str | None = None) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtra` naming ``extra`` (default: the one
    :data:`EXTRA` lists for it) and ``what`` needs it."""
    found = optional(module)
    if found is None:
        raise MissingExtra(message(module, extra, what))
    return found


def optional(module: str) -> ModuleType | None:
    """``module`` if it is installed, else None (a module it needs that is missing is raised:
    that is a broken install, not an absent extra)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] != module.split(".")[0]:
            raise
        return None


def missing(err: ModuleNotFoundError, extra: str, what: str) -> ImportError:
    """For a module's top-level imports: ``except ModuleNotFoundError as err: raise
    missing(err, "measure", __name__) from None`` turns a missing optional module into
    :class:`MissingExtra`; anything else missing is returned as it is."""
    if err.name and err.name.split(".")[0] in EXTRA:
        return MissingExtra(message(err.name, extra, what))
    return err


def explain(err: ImportError) -> str | None:
    """The one line for an ImportError of a module an extra installs (None for others)."""
    if isinstance(err, MissingExtra):
        return str(err)
    name = getattr(err, "name", None)
    if isinstance(err, ModuleNotFoundError) and name and name.split(".")[0] in EXTRA:
        return message(name)
    return None
