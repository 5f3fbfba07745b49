"""Where the project's data folders are, installed or in a checkout.

The repository keeps ``grammars/`` (tool-call formats, grammar templates), ``deploy/`` (the
HAProxy template) and ``server/`` (the HTTP package) at its top.  A wheel ships them inside the
package as ``afm_struct/grammars``, ``afm_struct/deploy`` and ``afm_struct/server``
(``package-dir`` in pyproject.toml), so an installed copy finds its data with
:mod:`importlib.resources` and a checkout (or an editable install) finds the folders beside
``afm_struct/``.
"""

from __future__ import annotations

import importlib
from importlib import resources
from pathlib import Path
from types import ModuleType

_CHECKOUT = Path(__file__).resolve().parents[1]


def data_dir(name: str) -> Path:
    """The data folder ``name`` (``grammars``, ``deploy``): the package's own copy when
    installed, else the checkout's top-level folder."""
    packaged = resources.files(__package__ or "afm_struct") / name
    if packaged.is_dir():
        # Wheels install as plain files, so the traversable is a filesystem path.
        return Path(str(packaged))
    return _CHECKOUT / name


def server_module(name: str = "") -> ModuleType:
    """The HTTP package (or its submodule ``name``): ``afm_struct.server`` when installed, the
    checkout's top-level ``server`` package when running from a checkout (where the tests
    import it by that name, so both spellings would otherwise be two copies of every module)."""
    suffix = f".{name}" if name else ""
    if (_CHECKOUT / "server" / "__init__.py").is_file() and not (
            Path(__file__).resolve().parent / "server").is_dir():
        try:
            return _checkout_server(suffix)
        except ModuleNotFoundError as exc:  # the checkout's root is not on sys.path
            if not (exc.name or "").startswith("server"):
                raise
    return importlib.import_module(f"afm_struct.server{suffix}")


def _checkout_server(suffix: str) -> ModuleType:
    module = importlib.import_module(f"server{suffix}")
    top = importlib.import_module("server")
    if Path(top.__file__ or "").resolve().parent != _CHECKOUT / "server":
        # Another distribution's ``server`` package: not ours.
        raise ModuleNotFoundError("server is not this checkout's", name="server")
    return module
