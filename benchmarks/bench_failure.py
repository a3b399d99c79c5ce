"""Throughput and latency under failure: akresil vs aiokafka vs confluent-kafka (the plain-script form of
``akresil bench``; same arguments).

    python benchmarks/bench_failure.py all --quick --out bench-results
    python benchmarks/bench_failure.py leader-move --clients akresil,aiokafka --seed 7

Writes bench.json (environment, per-second series, summaries, ratios), table.txt and one PNG per scenario.
See docs/benchmarks.md for the scenarios and how to read the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from akresil.bench.command import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
