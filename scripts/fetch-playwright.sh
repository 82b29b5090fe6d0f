#!/usr/bin/env bash
# Playwright for Python, pinned, in .deps/playwright-venv (from
# tests/support/playwright-requirements.txt): tests/serve_ui.rs drives the
# live view in a real headless Chromium with it. The browser is Debian's
# `chromium` (scripts/install-deps.sh), given to Playwright as its
# executable; Playwright's own browser download is never used. infer-stream
# itself needs neither. Safe to rerun: nothing is installed when the venv
# matches the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

pinned_venv "playwright venv" .deps/playwright-venv tests/support/playwright-requirements.txt '"$PY" -c "import playwright.sync_api"'
