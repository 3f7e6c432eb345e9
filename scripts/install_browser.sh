#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright's own browser download is not used), and a
# CJK font (WenQuanYi Micro Hei, 5 MB), so Chinese text is drawn with real glyphs, not boxes: the
# Chinese UI's layout tests and screenshots measure real text widths.
set -euo pipefail
packages=()
command -v chromium >/dev/null || packages+=(chromium)
fc-list :lang=zh 2>/dev/null | grep -q . || packages+=(fonts-wqy-microhei)
[ ${#packages[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
else
  sudo -n apt-get update -qq && sudo -n DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi
