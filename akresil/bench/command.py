"""``akresil bench SCENARIO|all``: argument parsing and the run loop, shared by the CLI and
``benchmarks/bench_failure.py``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Sequence

from . import report
from .clients import CLIENT_NAMES, DEFAULT_LOAD, LOADS
from .mock_scenarios import MOCK_SKIPS
from .progress import Progress
from .runner import Broker, run_failure, run_steady
from .scenarios import FAILURE_SCENARIOS, SCENARIOS, Scenario, build, steady_config

DEFAULT_OUT = "bench-results"


class BenchArgumentError(ValueError):
    """Arguments that parse but cannot run together."""


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
    p.add_argument("--load", choices=LOADS, default=DEFAULT_LOAD,
                   help="the failure scenarios' idiom: tasks, one task per record awaiting the client's "
                   "send-and-wait (akresil send, aiokafka send_and_wait, confluent-kafka a loop future resolved "
                   "by its delivery callback); callbacks, hand-over plus the client's delivery callback "
                   f"(akresil enqueue(on_delivery=), aiokafka send + add_done_callback, confluent-kafka "
                   f"produce(on_delivery=)); default {DEFAULT_LOAD}")
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.freeze() after each client's warm-up, as a long-running service does after start-up: "
                   "Python's full collections then scan only what the load keeps alive (failure scenarios)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib needed)")
    p.add_argument("--update-docs", metavar="PAGE", type=Path,
                   help="also replace the table between this harness's bench markers of this markdown page "
                   "(<!-- bench:begin/end --> for the proxy, <!-- bench-mock:begin/end --> for the mock)")
    p.add_argument("--bootstrap-servers", default=None,
                   help="use this broker instead of starting an embedded Tansu (proxy harness only)")
    p.add_argument("--harness", choices=tuple(report.HARNESSES), default="proxy",
                   help="proxy: FaultProxy in front of an embedded Tansu (default); mock: librdkafka's mock "
                   f"cluster, which cannot express {' or '.join(MOCK_SKIPS)} (skipped there)")


def _broker(args: argparse.Namespace) -> contextlib.AbstractAsyncContextManager[str | None]:
    """The Tansu broker behind the proxy; the mock harness starts a mock cluster per client phase instead."""
    return Broker(args.bootstrap_servers) if args.harness == "proxy" else contextlib.nullcontext(None)


async def _run_failure(args: argparse.Namespace, broker: str | None, sc: Scenario, client: str,
                       progress: Progress) -> tuple[dict[str, Any], dict[str, Any]]:
    if args.harness == "mock":
        from .mock_runner import run_failure_on_mock     # the binding is needed only when the mock is asked for
        return await run_failure_on_mock(sc, client, args.seed, progress)
    assert broker is not None
    return await run_failure(broker, sc, client, args.seed, progress)


async def run(args: argparse.Namespace, progress: Progress | None = None) -> dict[str, Any]:
    """Run the chosen scenarios for every chosen client; write and return the JSON document."""
    if args.update_docs is not None and not args.update_docs.is_file():
        raise FileNotFoundError(f"--update-docs: {args.update_docs} does not exist")
    if args.harness == "mock" and args.bootstrap_servers:
        raise BenchArgumentError("--bootstrap-servers: the mock harness starts its own librdkafka mock cluster "
                                 "per client phase; drop it or use --harness proxy")
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
        async with _broker(args) as broker:
            for name in names:
                if args.harness == "mock" and name in MOCK_SKIPS:
                    results[name] = {"skipped": MOCK_SKIPS[name]}
                    progress.note(f"{name}: skipped: {MOCK_SKIPS[name]}")
                    continue
                t0 = time.monotonic()
                if name == "steady":
                    assert broker is not None    # steady is proxy-only (MOCK_SKIPS)
                    cfg = steady_config(quick=args.quick)
                    per = {c: {"summary": await run_steady(broker, cfg, c, args.seed, progress)} for c in clients}
                    scenario = cfg.as_dict()
                else:
                    sc = build(name, quick=args.quick, seed=args.seed, load=args.load, gc_freeze=args.gc_freeze)
                    per = {}
                    for c in clients:
                        summary, series = await _run_failure(args, broker, sc, c, progress)
                        per[c] = {"summary": summary, "series": series}
                    scenario = sc.as_dict()
                results[name] = {"scenario": scenario, "clients": per,
                                 "ratios": report.ratios(name, {c: v["summary"] for c, v in per.items()},
                                                         harness=args.harness)}
                results[name]["wall_s"] = round(time.monotonic() - t0, 1)
                progress.note(headline(name, results[name]))
    doc = report.document(seed=args.seed, quick=args.quick, env=report.environment(), scenarios=results,
                          harness=args.harness)
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


__all__ = ["FAILURE_SCENARIOS", "SCENARIOS", "BenchArgumentError", "add_arguments", "parse_clients", "run"]
