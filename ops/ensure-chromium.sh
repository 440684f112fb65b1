#!/usr/bin/env bash
# Makes sure Debian's Chromium and chromedriver are installed (the console's
# browser tests drive them); installs them from Debian's packages if not.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
echo "ensure-chromium: installing chromium and chromium-driver" >&2
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
else
  sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi
