#!/usr/bin/env bash
# Chromium for the playground's browser tests (tests/server/test_playground_browser.py, driven by
# Playwright's Python package with executable_path: no `playwright install`, no download
# beyond Debian's package).  Debian's package when apt is ours to use; otherwise say how.  Never
# fails the set-up: without Chromium everything but the browser tests works, and they skip
# with the reason.
set -u
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
case "$(uname -s)" in
  Darwin)
    echo "Chromium is not installed; for the playground's browser tests: brew install --cask chromium"
    exit 0 ;;
esac
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing Chromium (chromium) for the playground's browser tests"
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 ||
   (apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1))
fi
command -v chromium >/dev/null 2>&1 ||
  echo "warning: Chromium not installed (the playground's browser tests need it: apt-get install -y chromium as root)"
exit 0
