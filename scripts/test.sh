#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite (unit + integration against brokers the tests start).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the Apache Kafka tier (tests/apache) runs a real KRaft cluster: Java 17+ (setup.sh) and Maven to fetch its jars once
if ! command -v mvn >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "test.sh: no mvn found; installing maven (fetches Apache Kafka's jars for tests/apache)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
    else
        echo "test.sh: the Apache Kafka tier needs Maven on PATH (e.g. apt-get install maven)" >&2
        exit 1
    fi
fi
.venv/bin/python -c "from akresil.testing.kafka_jars import main; raise SystemExit(main())" >/dev/null
exec .venv/bin/python -m pytest -q "$@"
