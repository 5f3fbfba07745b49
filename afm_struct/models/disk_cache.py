"""A disk cache of what is derived from a model file or a vocabulary, so a second start is faster.

Each ``afm-struct serve`` start rebuilds structures that depend only on its model's files: the
tokenizer read out of a GGUF header (~0.6 s of Python parsing for 49k tokens) and the closing
search's candidate vocabulary (~0.5 s).  Both are written here once and read back (in a few
milliseconds) by every later start of the same model, as llama.cpp and vLLM keep compiled
state under ``~/.cache``.

- **Where**: ``$AFM_STRUCT_CACHE_DIR``, else ``$XDG_CACHE_HOME/afm-struct``, else
  ``~/.cache/afm-struct``.  ``AFM_STRUCT_NO_CACHE=1`` (or ``serve --no-cache``) turns it off.
- **Keys** name what the entry was derived from (a content digest: a GGUF's path, size, mtime
  and first bytes; a vocabulary's fingerprint) and the code that derived it (a digest of the
  building modules' source, :func:`code_digest`), together with the package version and
  :data:`FORMAT`: an upgrade or an edited checkout never reads a layout it did not write; it
  misses and rebuilds.
- **Files** are written whole to a temporary name and renamed over the entry (atomic on POSIX),
  so a reader sees an old entry or a new one, never half of one, and two processes writing one
  entry at once each leave a whole file.  Each holds a SHA-256 of its payload: a truncated or
  corrupted file is rebuilt (one warning line), never trusted and never a crash.  A cache
  directory that cannot be written costs the rebuild and one warning, nothing else.
- Payloads are JSON (no pickle: a cache file is data, never code).

:data:`stats` counts hits, misses, writes and rejected files per kind, for tests and logs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

_log = logging.getLogger(__name__)

# The on-disk layout's number: bump it when a payload's fields change meaning.
FORMAT = 1
DIR_ENV = "AFM_STRUCT_CACHE_DIR"
OFF_ENV = "AFM_STRUCT_NO_CACHE"
_MAGIC = b"afm-struct-cache\n"

_T = TypeVar("_T")
_R = TypeVar("_R")

# ("hit" | "miss" | "write" | "corrupt" | "unwritable", kind) -> count, in this process.
stats: Counter[tuple[str, str]] = Counter()
_stats_lock = threading.Lock()
_disabled = False
_warned: set[str] = set()


def disable() -> None:
    """Turn the cache off for this process (``serve --no-cache``); entries already on disk stay."""
    global _disabled
    _disabled = True


def enabled() -> bool:
    """Whether entries are read and written (not after :func:`disable` nor under ``AFM_STRUCT_NO_CACHE``)."""
    return not _disabled and os.environ.get(OFF_ENV, "").strip().lower() in ("", "0", "false", "no")


def cache_dir() -> Path:
    """The cache directory (see the module docstring); not created until an entry is written."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "afm-struct"


@functools.cache
def _version() -> str:
    # The installed distribution's version (the facade's ``__version__`` sits in a higher layer).
    try:
        return metadata.version("afm-struct")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_digest(*modules: ModuleType) -> str:
    """A digest of the source files of ``modules``: put it in a key so that an entry built by
    other code (a checkout edited between two starts, not only a new release) is not read."""
    digest = hashlib.sha256()
    for module in modules:
        source = getattr(module, "__file__", None)
        try:
            digest.update(Path(source).read_bytes() if source else module.__name__.encode())
        except OSError:
            digest.update(module.__name__.encode())
    return digest.hexdigest()


def entry_path(kind: str, key: str) -> Path:
    """The file of the entry ``kind`` / ``key`` (the version and :data:`FORMAT` are in its name)."""
    digest = hashlib.sha256(f"{_version()}\0{FORMAT}\0{kind}\0{key}".encode()).hexdigest()[:40]
    return cache_dir() / f"{kind}-{digest}.json"


def _count(event: str, kind: str) -> None:
    with _stats_lock:
        stats[(event, kind)] += 1


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        _log.warning(message)


def _read(path: Path, kind: str, key: str) -> Any | None:
    """The payload stored at ``path`` for ``key``, or None when absent or not a whole entry."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # never written (or no directory yet)
        return None
    except OSError as exc:
        _warn_once(f"read:{path}", f"cache entry {path} unreadable ({exc}); rebuilding it")
        return None
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("not a cache file")
        head, _, payload = data[len(_MAGIC):].partition(b"\n")
        header = json.loads(head)
        if header.get("kind") != kind or header.get("key") != key or header.get("format") != FORMAT \
                or header.get("version") != _version():
            raise ValueError("written for another entry")
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise ValueError("checksum mismatch (truncated or corrupted)")
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        _count("corrupt", kind)
        _log.warning("cache entry %s rejected (%s); rebuilding it", path, exc)
        return None


def _replace_atomically(path: Path, kind: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` whole or not at all; False (one warning) when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A temporary file of our own in the same directory, renamed over the entry: readers
        # and concurrent writers only ever see whole files.
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        _count("unwritable", kind)
        _warn_once(f"write:{path.parent}", f"cache directory {path.parent} not writable ({exc}); "
                   f"set {DIR_ENV} to a writable directory or {OFF_ENV}=1")
        return False
    return True


def _write(path: Path, kind: str, key: str, value: Any) -> None:
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    header = json.dumps({"kind": kind, "key": key, "format": FORMAT, "version": _version(),
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    if _replace_atomically(path, kind, _MAGIC + header + b"\n" + payload):
        _count("write", kind)


def write_file(kind: str, key: str, data: bytes) -> str | None:
    """Store ``data`` as the plain side file of entry ``kind`` / ``key`` (for a reader that wants
    a path, such as ``tokenizers``' ``from_file``); its SHA-256 to record in the entry, or None
    when it could not be written.  Written before the entry that names it."""
    if not _replace_atomically(entry_path(kind, key).with_suffix(".data"), kind, data):
        return None
    return hashlib.sha256(data).hexdigest()


def checked_file(kind: str, key: str, sha256: Any) -> Path:
    """The side file of entry ``kind`` / ``key``, once its content is checked against ``sha256``;
    ValueError (the entry is then rebuilt) when it is missing or differs.  Concurrent writers
    of one key write the same bytes, so the file a reader then opens is the one checked."""
    path = entry_path(kind, key).with_suffix(".data")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"side file {path.name} unreadable ({exc})") from None
    if not isinstance(sha256, str) or hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"side file {path.name} changed (checksum mismatch)")
    return path


def load_or_build(kind: str, key: str, build: Callable[[], _T], *,
                  encode: Callable[[_T], Any], decode: Callable[[Any], _R]) -> _T | _R:
    """The value of entry ``kind`` / ``key``: decoded from the cache when a whole entry is there,
    else built with ``build`` and stored (``encode`` makes it JSON; ``decode`` makes a value
    back, usually the built one's equal).  A payload ``decode`` rejects (it raises) counts as
    corrupt and is rebuilt."""
    if not enabled():
        return build()
    path = entry_path(kind, key)
    stored = _read(path, kind, key)
    if stored is not None:
        try:
            value = decode(stored)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            _count("corrupt", kind)
            _log.warning("cache entry %s rejected (%s); rebuilding it", path, exc)
        else:
            _count("hit", kind)
            _log.debug("%s read from the cache (%s)", kind, path)
            return value
    _count("miss", kind)
    value = build()
    _write(path, kind, key, encode(value))
    return value


def file_digest(path: Path, *, head_bytes: int = 1 << 16) -> str:
    """A digest naming a file's content cheaply: its resolved path, size, mtime, inode and first
    ``head_bytes`` bytes (a file rewritten in place changes its mtime; a copy its path)."""
    resolved = path.resolve()
    st = resolved.stat()
    digest = hashlib.sha256(f"{resolved}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode())
    with open(resolved, "rb") as f:
        digest.update(f.read(head_bytes))
    return digest.hexdigest()
