#!/usr/bin/env bash
# Set up (if needed) and run the demo against the embedded broker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/akresil demo "$@"
