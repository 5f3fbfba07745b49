"""``GET /playground``: the playground's static page (HTML, CSS, JavaScript inside the package:
no build step, no CDN, works offline).

The page itself holds no data and is served without a key (:data:`PAGE_PATHS` are open in
server/auth.py), so a browser can load it before the user types one; everything it reads
(compile, validate, chat completions, cancel) goes through the API with the key the page's
key field holds, sent as ``Authorization: Bearer``, under the API's own rules.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from afm_struct.errors import NotFoundError

router = APIRouter()
FOLDER = Path(__file__).resolve().parent / "playground"
# The page's files and their types: a fixed list, so no request path reaches the file system.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "gallery.js": "text/javascript; charset=utf-8",
    "tokens.js": "text/javascript; charset=utf-8",
    "panes.js": "text/javascript; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
}
PAGE_PATHS = frozenset({"/playground", "/playground/", *(f"/playground/{name}" for name in FILES)})


@router.get("/playground", include_in_schema=False)
async def page() -> RedirectResponse:
    """The page lives under ``/playground/`` so its files resolve relative to it."""
    return RedirectResponse("/playground/", status_code=307)


@router.get("/playground/", include_in_schema=False)
async def index() -> FileResponse:
    """The page."""
    return _file("index.html")


@router.get("/playground/{name}", include_in_schema=False)
async def asset(name: str) -> FileResponse:
    """One of the page's files (anything else: 404)."""
    return _file(name)


def _file(name: str) -> FileResponse:
    if name not in FILES:
        raise NotFoundError(f"no playground file {name!r}")
    return FileResponse(FOLDER / name, media_type=FILES[name], headers={"Cache-Control": "no-cache"})
