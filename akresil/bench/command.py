"""``akresil bench SCENARIO|all``: argument parsing and the run loop, shared by the CLI and
``benchmarks/bench_failure.py``."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any, Sequence

from . import report
from .clients import CLIENT_NAMES
from .progress import Progress
from .runner import Broker, run_failure, run_steady
from .scenarios import FAILURE_SCENARIOS, SCENARIOS, build, steady_config

DEFAULT_OUT = "bench-results"


def parse_clients(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in CLIENT_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--clients: unknown {', '.join(unknown) or '(none given)'} "
                                         f"(choose from {', '.join(CLIENT_NAMES)})")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", choices=(*SCENARIOS, "all"), metavar="SCENARIO",
                   help=f"one of {', '.join(SCENARIOS)}, or all")
    p.add_argument("--quick", action="store_true", help="short scenarios (all of them in a few minutes)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"directory for bench.json, table.txt and the PNGs "
                   f"(default {DEFAULT_OUT})")
    p.add_argument("--seed", type=int, default=1, help="fixes values and fault scripts (default 1)")
    p.add_argument("--clients", type=parse_clients, default=CLIENT_NAMES,
                   help=f"comma-separated subset of {','.join(CLIENT_NAMES)} (default: all)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib needed)")
    p.add_argument("--update-docs", metavar="PAGE", type=Path,
                   help="also replace the table between the bench markers of this markdown page")
    p.add_argument("--bootstrap-servers", default=None,
                   help="use this broker instead of starting an embedded Tansu")


async def run(args: argparse.Namespace, progress: Progress | None = None) -> dict[str, Any]:
    """Run the chosen scenarios for every chosen client; write and return the JSON document."""
    if args.update_docs is not None and not args.update_docs.is_file():
        raise FileNotFoundError(f"--update-docs: {args.update_docs} does not exist")
    if not args.no_plots:
        from .plots import require
        require()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)   # it logs every retry at WARNING
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    clients: Sequence[str] = args.clients
    progress = progress or Progress()
    results: dict[str, Any] = {}
    started = time.monotonic()
    with progress:
        async with Broker(args.bootstrap_servers) as broker:
            for name in names:
                t0 = time.monotonic()
                if name == "steady":
                    cfg = steady_config(quick=args.quick)
                    per = {c: {"summary": await run_steady(broker, cfg, c, args.seed, progress)} for c in clients}
                    results[name] = {"scenario": cfg.as_dict(), "clients": per,
                                     "ratios": report.ratios(name, {c: v["summary"] for c, v in per.items()})}
                else:
                    sc = build(name, quick=args.quick, seed=args.seed)
                    per = {}
                    for c in clients:
                        summary, series = await run_failure(broker, sc, c, args.seed, progress)
                        per[c] = {"summary": summary, "series": series}
                    results[name] = {"scenario": sc.as_dict(), "clients": per,
                                     "ratios": report.ratios(name, {c: v["summary"] for c, v in per.items()})}
                results[name]["wall_s"] = round(time.monotonic() - t0, 1)
                progress.note(headline(name, results[name]))
    doc = report.document(seed=args.seed, quick=args.quick, env=report.environment(), scenarios=results)
    doc["wall_s"] = round(time.monotonic() - started, 1)
    out = Path(args.out)
    written = report.write(doc, out, args.update_docs)
    if not args.no_plots:
        from .plots import plot_all
        written += plot_all(doc, out)
    progress.note("wrote " + ", ".join(str(p) for p in written))
    return doc


def headline(name: str, result: dict[str, Any]) -> str:
    parts = []
    for row in result["ratios"][:2]:
        vals = ", ".join(f"{c} {report._fmt(v)}" for c, v in row["values"].items())
        parts.append(f"{row['metric']}: {vals}")
    return f"{name} ({result['wall_s']} s): " + "; ".join(parts)


__all__ = ["FAILURE_SCENARIOS", "SCENARIOS", "add_arguments", "parse_clients", "run"]
