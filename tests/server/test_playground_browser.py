"""The playground in a real browser: Debian's headless Chromium, driven by Playwright's Python
package (``executable_path``; no browser download), against one scripted-model server for the
module.  Edit a schema and see the compile verdict; Run streams both panes, the badges right for
a valid constrained output and an invalid free one; the per-token view; cancel by request ID;
copy as curl; and no console error from the page's JavaScript in any of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (scripts/install-chromium.sh, run by make setup, installs it)",
                allow_module_level=True)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PERSON = '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.com"}'
LONG = " ".join(["lorem ipsum dolor"] * 600)
WAIT_MS = 30_000


def _answer(tokenizer: Any) -> Any:
    def answer(ids: list[int]) -> str:
        prompt = tokenizer.decode(ids)
        if "Extract the person" in prompt:
            return PERSON
        if "keep talking" in prompt:
            return LONG
        return "I think it is positive."  # prose: no valid choice, no JSON
    return answer


@pytest.fixture(scope="module")
def live(tokenizer: Any) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, Script(_answer(tokenizer))))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, live: LiveServer) -> Iterator[Any]:
    """The page, loaded and compiled; afterwards, no console error may have been logged."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"{live.url}/playground")
    tab.wait_for_selector("#verdict[data-state=exact]", timeout=WAIT_MS)
    yield tab
    context.close()
    assert errors == []


def _badge(page: Any, pane: str) -> str:
    """The pane's badge state once the run ended there."""
    ends = ("valid", "invalid", "cancelled", "error")
    done = ",".join(f"#pane-{pane} .badge[data-state={s}]" for s in ends)
    page.wait_for_selector(done, timeout=WAIT_MS)
    return str(page.get_attribute(f"#pane-{pane} .badge", "data-state"))


def test_compile_verdict_follows_the_editor(page: Any) -> None:
    page.fill("#constraint", '{"type": "objekt"}')
    page.wait_for_selector("#verdict[data-state=error]", timeout=WAIT_MS)
    assert "response_format.json_schema.schema" in page.inner_text("#verdict")
    page.fill("#constraint", '{"type": "array", "items": {"type": "string"}, "uniqueItems": true}')
    page.wait_for_selector("#verdict[data-state=relaxed]", timeout=WAIT_MS)
    assert "uniqueItems" in page.inner_text("#verdict")
    page.select_option("#kind", "regex")
    page.fill("#constraint", "[0-9]{4}-[0-9]{2}")
    page.wait_for_selector("#verdict[data-state=exact]", timeout=WAIT_MS)
    page.fill("#constraint", "not json")
    page.select_option("#kind", "tools")
    page.wait_for_selector("#verdict[data-state=error]", timeout=WAIT_MS)
    assert "not JSON" in page.inner_text("#verdict")


def test_run_streams_both_panes_with_token_details(page: Any) -> None:
    page.click("#run")
    assert _badge(page, "constrained") == "valid"
    assert _badge(page, "free") == "valid"  # the script writes the person as plain JSON too
    assert page.inner_text("#pane-constrained .mode") == "exact"
    assert page.inner_text("#pane-free .mode") == "no constraint"
    for pane in ("constrained", "free"):
        assert page.inner_text(f"#pane-{pane} .output") == PERSON
        assert "finish stop" in page.inner_text(f"#pane-{pane} .stats")
    # The grammar forced the keys: marked; the scripted model wanted what it got: no pressure.
    assert page.locator("#pane-constrained .tok[data-forced=true]").count() > 0
    assert page.locator("#pane-free .tok[data-forced=true]").count() == 0
    fields = page.locator("#pane-constrained table.fields tr[data-field]").all_inner_texts()
    assert any(row.startswith("$.name") for row in fields)
    page.locator("#pane-constrained .tok[data-forced=false]").first.hover()
    card = page.inner_text("#tooltip")
    assert "alternatives:" in card and "constraint pressure" in card
    # The copied requests are the exact request: run as copied, they stream the same answer.
    page.click("#copy-curl")
    curl = page.inner_text("#copied")
    assert curl.startswith("curl -N") and '"include_token_details": true' in curl
    shell = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
    streamed = [json.loads(line[6:]) for line in shell.stdout.splitlines()
                if line.startswith("data: {") and '"choices"' in line]
    assert "".join(c["delta"].get("content") or "" for e in streamed for c in e["choices"]) == PERSON
    page.click("#copy-python")
    script = page.inner_text("#copied")
    assert "client.chat.completions.create(" in script
    python = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert python.returncode == 0, python.stderr[-2000:]
    assert python.stdout == PERSON


def test_badges_for_a_valid_constrained_and_an_invalid_free_output(page: Any) -> None:
    page.select_option("#gallery", "classification")
    page.wait_for_selector("#verdict[data-state=exact]", timeout=WAIT_MS)
    page.click("#run")
    assert _badge(page, "constrained") == "valid"
    assert _badge(page, "free") == "invalid"
    assert page.inner_text("#pane-constrained .output") in ("positive", "negative", "neutral")
    assert page.inner_text("#pane-free .output") == "I think it is positive."
    # The model wanted prose; the mask removed it: the pressure shows on the sampled token.
    pressures = page.locator("#pane-constrained .tok[data-forced=false]").evaluate_all(
        "spans => spans.map(s => Number(s.dataset.pressure))")
    assert max(pressures) > 0.9


def test_cancel_by_request_id(page: Any) -> None:
    page.select_option("#kind", "regex")
    page.fill("#constraint", "[a-z ]+")
    page.fill("#prompt", "keep talking")
    page.fill("#max-tokens", "4000")
    page.wait_for_selector("#verdict[data-state=exact]", timeout=WAIT_MS)
    page.click("#run")
    page.wait_for_selector("#pane-constrained .tok >> nth=20", timeout=WAIT_MS)
    page.wait_for_selector("#pane-free .tok >> nth=20", timeout=WAIT_MS)
    page.click("#cancel")
    assert _badge(page, "constrained") == "cancelled"
    assert _badge(page, "free") == "cancelled"
    for pane in ("constrained", "free"):
        assert "finish cancelled" in page.inner_text(f"#pane-{pane} .stats")
        assert len(page.inner_text(f"#pane-{pane} .output")) < len(LONG)
    page.wait_for_selector("#run:not([disabled])", timeout=WAIT_MS)
