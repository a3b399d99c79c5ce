"""``akresil bench`` with akresil's producer given extra settings, for an A/B of one knob on the same scenario.

The first argument is ``KEY=VALUE,...`` (the producer's own setting names, values as ``-X`` takes them: ints,
``true``/``false``, strings); the rest is ``akresil bench``'s command line. Only the akresil client changes; the
other clients and the scenario stay as ``akresil bench`` sets them.

    python benchmarks/bench_akresil_variant.py max_in_flight_requests_per_connection=1 \\
        leader-move --quick --rounds 9 --harness apache --clients akresil --no-plots --out DIR
"""

from __future__ import annotations

import sys
from typing import Any

import akresil.bench.clients as clients
from akresil.cli import main, parse_properties


def run(argv: list[str]) -> int:
    if not argv or "=" not in argv[0]:
        print(__doc__, file=sys.stderr)
        return 2
    extra = parse_properties([item for item in argv[0].split(",") if item])
    base = clients.settings_for

    def settings_for(client: str, settings: clients.Settings) -> dict[str, Any]:
        out = base(client, settings)
        if client == "akresil":
            out.update(extra)
        return out

    clients.settings_for = settings_for          # AkresilProducer reads it at construction
    return main(["bench", *argv[1:]])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
