#!/usr/bin/env bash
# Set up (if needed) and run the demo against the embedded broker: Apache Kafka (setup.sh installs Java if it
# can; the first run fetches Kafka's jars once), or Tansu with a warning where there is no Java.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/akresil demo "$@"
