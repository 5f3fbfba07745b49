"""The disk cache of what is derived from a model's files (afm_struct/models/disk_cache.py): a
second load reads it, a corrupt entry is rebuilt with one warning, a different file or
vocabulary misses, two processes writing one entry leave it whole, and what is read back is
what was built."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from afm_struct.grammar.closer.vocab import build_closing_vocab, cached_closing_vocab
from afm_struct.models import disk_cache
from afm_struct.models.byte_tokenizer import byte_tokenizer
from afm_struct.models.embedded import embedded_model_path
from afm_struct.models.gguf import read_gguf
from afm_struct.models.loader import load_tokenizer
from afm_struct.models.tokenizer import Tokenizer, from_gguf

from .gguf_factory import tiny_gguf

GGUF = "gguf-tokenizer"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache directory of this test's own, and the counters from zero."""
    directory = tmp_path / "cache"
    monkeypatch.setenv(disk_cache.DIR_ENV, str(directory))
    monkeypatch.delenv(disk_cache.OFF_ENV, raising=False)
    monkeypatch.setattr(disk_cache, "stats", type(disk_cache.stats)())
    monkeypatch.setattr(disk_cache, "_warned", set())
    return directory


def _same_tokenizer(a: Tokenizer, b: Tokenizer) -> None:
    assert a.vocabulary_fingerprint() == b.vocabulary_fingerprint()
    assert (a.eos_token_ids, a.bos_token_id, a.add_bos, a.vocab_size) == \
        (b.eos_token_ids, b.bos_token_id, b.add_bos, b.vocab_size)
    assert a.hf.chat_template == b.hf.chat_template
    assert a.hf.special_tokens_map == b.hf.special_tokens_map
    text = "Hello <|im_start|> wörld 12345 {\"a\": [1, 2]}"
    assert a.encode(text, add_special_tokens=True) == b.encode(text, add_special_tokens=True)


def _entries(directory: Path, kind: str) -> list[Path]:
    return sorted(directory.glob(f"{kind}-*.json"))


def test_second_load_reads_the_gguf_tokenizer_from_the_cache(cache: Path) -> None:
    first = load_tokenizer()
    assert disk_cache.stats[("miss", GGUF)] == 1 and disk_cache.stats[("write", GGUF)] == 1
    assert len(_entries(cache, GGUF)) == 1
    second = load_tokenizer()
    assert disk_cache.stats[("hit", GGUF)] == 1 and disk_cache.stats[("miss", GGUF)] == 1
    built = from_gguf(read_gguf(embedded_model_path()))  # no cache involved
    _same_tokenizer(first, built)
    _same_tokenizer(second, built)


def test_a_corrupt_entry_is_rebuilt_with_one_warning(cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    tokenizer = byte_tokenizer()
    good = cached_closing_vocab(tokenizer)
    [entry] = _entries(cache, "closing-vocab")
    whole = entry.read_bytes()
    for damage in (whole[: len(whole) // 2],                      # truncated
                   whole[:-3] + b"]]]",                            # a payload that fails its checksum
                   b"not a cache file at all"):
        entry.write_bytes(damage)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="afm_struct.models.disk_cache"):
            again = cached_closing_vocab(tokenizer)
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        assert "rebuilding" in caplog.records[0].getMessage()
        assert again.texts == good.texts and entry.read_bytes() == whole  # rewritten whole
    assert disk_cache.stats[("corrupt", "closing-vocab")] == 3
    assert disk_cache.stats[("hit", "closing-vocab")] == 0


def test_an_entry_that_decodes_wrong_is_rebuilt(cache: Path) -> None:
    """A whole file whose payload is not what the reader expects (another layout) is rejected."""
    def build() -> list[int]:
        return [1, 2, 3]

    def decode(stored: object) -> list[int]:
        if not isinstance(stored, list):
            raise TypeError("not a list")
        return [int(x) for x in stored]

    assert disk_cache.load_or_build("t", "k", build, encode=list, decode=decode) == [1, 2, 3]
    path = disk_cache.entry_path("t", "k")
    head, _, _ = path.read_bytes().partition(b"\n{")
    payload = b'{"a": 1}'
    import hashlib

    header = json.loads(path.read_bytes().split(b"\n")[1])
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    path.write_bytes(head + b"\n" + json.dumps(header).encode() + b"\n" + payload)
    assert disk_cache.load_or_build("t", "k", build, encode=list, decode=decode) == [1, 2, 3]
    assert disk_cache.stats[("corrupt", "t")] == 1 and disk_cache.stats[("hit", "t")] == 0
    assert disk_cache.load_or_build("t", "k", build, encode=list, decode=decode) == [1, 2, 3]
    assert disk_cache.stats[("hit", "t")] == 1


def test_a_different_file_or_vocabulary_misses(cache: Path, tmp_path: Path) -> None:
    paths = [tiny_gguf(name, tmp_path)[1] for name in ("qwen2", "llama")]
    loaded = [load_tokenizer(str(p)) for p in paths]
    assert disk_cache.stats[("miss", GGUF)] == 2 and disk_cache.stats[("hit", GGUF)] == 0
    assert len(_entries(cache, GGUF)) == 2
    for path, tokenizer in zip(paths, loaded, strict=True):
        _same_tokenizer(load_tokenizer(str(path)), from_gguf(read_gguf(path)))
        _same_tokenizer(tokenizer, from_gguf(read_gguf(path)))
    assert disk_cache.stats[("hit", GGUF)] == 2
    # The tokenizer's JSON side file changed or gone: the entry is rebuilt, not trusted.
    sides = set(cache.glob(f"{GGUF}-*.data"))
    assert len(sides) == 2
    for damage in (lambda side: side.write_bytes(side.read_bytes()[:-10]), Path.unlink):
        for side in sides:
            damage(side)
        _same_tokenizer(load_tokenizer(str(paths[1])), from_gguf(read_gguf(paths[1])))
    assert disk_cache.stats[("corrupt", GGUF)] == 2 and disk_cache.stats[("miss", GGUF)] == 4
    _same_tokenizer(load_tokenizer(str(paths[1])), from_gguf(read_gguf(paths[1])))  # rewritten whole
    assert disk_cache.stats[("hit", GGUF)] == 3
    # The same file rewritten (another mtime and size) is another entry.
    os.utime(paths[0], ns=(1, 1))
    load_tokenizer(str(paths[0]))
    assert disk_cache.stats[("miss", GGUF)] == 5
    # Two vocabularies: two closing-vocabulary entries, each read back as its own.
    vocabs = [cached_closing_vocab(t) for t in loaded]
    assert len(_entries(cache, "closing-vocab")) == 2
    assert [cached_closing_vocab(t).texts for t in loaded] == [v.texts for v in vocabs]
    assert disk_cache.stats[("hit", "closing-vocab")] == 2


def test_the_closing_vocabulary_read_back_is_the_one_built(cache: Path, tokenizer: Tokenizer) -> None:
    built = build_closing_vocab(tokenizer)
    cached_closing_vocab(tokenizer)
    read = cached_closing_vocab(tokenizer)
    assert disk_cache.stats[("hit", "closing-vocab")] == 1
    for name, value in vars(built).items():
        other = vars(read)[name]
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other), name
        elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), np.ndarray):
            assert value.keys() == other.keys(), name
            assert all(np.array_equal(value[k], other[k]) for k in value), name
        elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
            assert all(np.array_equal(x, y) for x, y in zip(value, other, strict=True)), name
        else:
            assert value == other, name


def test_off_by_env_or_switch_writes_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = byte_tokenizer()
    monkeypatch.setenv(disk_cache.OFF_ENV, "1")
    cached_closing_vocab(tokenizer)
    monkeypatch.delenv(disk_cache.OFF_ENV)
    monkeypatch.setattr(disk_cache, "_disabled", False)
    disk_cache.disable()
    cached_closing_vocab(tokenizer)
    assert not cache.exists() and not disk_cache.stats


def test_an_unwritable_directory_costs_a_rebuild_and_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(disk_cache.DIR_ENV, str(blocker / "cache"))  # under a file: mkdir fails
    monkeypatch.setattr(disk_cache, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="afm_struct.models.disk_cache"):
        for _ in range(2):
            assert disk_cache.load_or_build("t", "k", lambda: [7], encode=list, decode=list) == [7]
    assert len(caplog.records) == 1 and "not writable" in caplog.records[0].getMessage()


def test_the_directory_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(disk_cache.DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_dir() == tmp_path / "afm-struct"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert disk_cache.cache_dir() == Path.home() / ".cache" / "afm-struct"


def test_the_version_and_format_are_in_the_key(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = disk_cache.entry_path("t", "k")
    monkeypatch.setattr(disk_cache, "FORMAT", disk_cache.FORMAT + 1)
    assert disk_cache.entry_path("t", "k") != first
    monkeypatch.setattr(disk_cache, "_version", lambda: "999.0")
    assert disk_cache.entry_path("t", "k") != first


_WRITER = """
import sys
from afm_struct.models import disk_cache

payload = [str(i) * 16 for i in range(40_000)]  # ~3 MB: a write takes a while
path = disk_cache.entry_path("race", "k")
for round in range(int(sys.argv[1])):
    path.unlink(missing_ok=True)  # written again by one of the two, while the other reads
    for _ in range(4):
        assert disk_cache.load_or_build("race", "k", lambda: payload, encode=list, decode=list) == payload
print(dict(disk_cache.stats))
assert not any(event == "corrupt" for event, _ in disk_cache.stats), disk_cache.stats
"""


def test_two_processes_writing_one_entry_leave_it_whole(cache: Path) -> None:
    env = {**os.environ, disk_cache.DIR_ENV: str(cache)}
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, "10"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert "'hit'" in out or "'write'" in out, out
    assert [p.name for p in cache.iterdir() if p.suffix == ".tmp"] == []
    assert disk_cache.load_or_build("race", "k", lambda: None, encode=list, decode=list) == \
        [str(i) * 16 for i in range(40_000)]
    assert disk_cache.stats[("hit", "race")] == 1
