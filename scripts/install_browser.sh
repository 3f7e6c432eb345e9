#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright's own browser download is not used).
set -euo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  sudo -n apt-get update -qq && sudo -n DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
