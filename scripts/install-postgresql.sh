#!/usr/bin/env bash
# PostgreSQL's server binaries (initdb, pg_ctl) for the shared response store's tests
# (tests/store start a throwaway server from them).  Debian's package when apt is ours to use;
# otherwise say how.  Never fails the set-up: without them those tests skip with the reason.
set -u
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
case "$(uname -s)" in
  Darwin)
    echo "PostgreSQL is not installed; for the shared response store's tests: brew install postgresql"
    exit 0 ;;
esac
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing PostgreSQL (postgresql) for the shared response store's tests"
  (apt-get install -y -qq postgresql >/dev/null 2>&1 ||
   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq postgresql >/dev/null 2>&1))
fi
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 ||
  echo "warning: PostgreSQL not installed (its store tests skip: apt-get install -y postgresql as root)"
exit 0
