#!/usr/bin/env bash
# HAProxy for `afm-struct cluster` / `make cluster` (deploy/haproxy.cfg needs 2.6+).  Debian's
# package when apt is ours to use; otherwise say how.  Never fails the set-up: without HAProxy
# everything but the cluster works, and tests/cluster skips with the reason.
set -u
if command -v haproxy >/dev/null 2>&1; then
  exit 0
fi
case "$(uname -s)" in
  Darwin)
    echo "HAProxy is not installed; for afm-struct cluster: brew install haproxy"
    exit 0 ;;
esac
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing HAProxy (haproxy) for afm-struct cluster"
  (apt-get install -y -qq haproxy >/dev/null 2>&1 ||
   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq haproxy >/dev/null 2>&1))
fi
command -v haproxy >/dev/null 2>&1 ||
  echo "warning: HAProxy not installed (afm-struct cluster needs it: apt-get install -y haproxy as root)"
exit 0
