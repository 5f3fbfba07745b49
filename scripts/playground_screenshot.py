"""Take docs/playground.png: the playground against the embedded model (SmolLM2-135M-Instruct,
no network), the extraction example run constrained and free, a token's hover card open.

    .venv/bin/python scripts/playground_screenshot.py [OUT.png]

Needs Chromium (scripts/install-chromium.sh) and the dev extra's playwright.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from afm_struct.models import load_model
from server.live import start_server

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/playground.png")
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Chromium is not installed (scripts/install-chromium.sh)", file=sys.stderr)
        return 1
    live = start_server(load_model(None))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 940})
            page.goto(f"{live.url}/playground")
            page.wait_for_selector("#verdict[data-state=exact]", timeout=60_000)
            page.click("#run")
            for pane in ("constrained", "free"):
                page.wait_for_selector(f"#pane-{pane} .badge.valid, #pane-{pane} .badge.invalid",
                                       timeout=300_000)
            page.locator("#pane-constrained .tok[data-forced=false]").nth(2).hover()
            page.screenshot(path=str(out))
            browser.close()
    finally:
        live.stop()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
