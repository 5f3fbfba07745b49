#!/usr/bin/env bash
# Prometheus, for tests/operate/test_prometheus.py (a real server scraping a scripted cluster).
# Debian's package when apt is ours to use; otherwise say how.  Never fails the set-up: without
# it only that test skips, with the reason.
set -u
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
case "$(uname -s)" in
  Darwin)
    echo "Prometheus is not installed; for the metrics test: brew install prometheus"
    exit 0 ;;
esac
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing Prometheus (prometheus) for the metrics test"
  (apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
   (apt-get update -qq >/dev/null 2>&1 &&
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1))
fi
command -v prometheus >/dev/null 2>&1 ||
  echo "warning: Prometheus not installed (tests/operate/test_prometheus.py skips; apt-get install -y prometheus as root)"
exit 0
