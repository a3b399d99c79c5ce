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
from .clients import CLIENT_NAMES, DEFAULT_CLIENTS, DEFAULT_LOAD, LOADS
from .apache_runner import APACHE_SKIPS
from .mock_scenarios import MOCK_SKIPS
from .progress import Progress
from .runner import Broker, run_failure, run_steady
from .scenarios import FAILURE_SCENARIOS, SCENARIOS, Scenario, build, steady_config

DEFAULT_OUT = "bench-results"
#: steady measures throughput in ~0.5 s passes: on a cold JVM broker the first rounds measured its JIT (a 1 KiB
#: run went 149k, 271k, 275k, 368k, 435k msg/s over five rounds for one client, the order rotating)
STEADY_WARMUP_ROUNDS = 1


class BenchArgumentError(ValueError):
    """Arguments that parse but cannot run together."""


def parse_clients(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in CLIENT_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--clients: unknown {', '.join(unknown) or '(none given)'} "
                                         f"(choose from {', '.join(CLIENT_NAMES)})")
    return names


def parse_broker_config(text: str) -> dict[str, str]:
    """``k=v,...`` server.properties entries for every broker of an apache run (e.g. the followers' fetch wait and
    backoff, which set how long a moved partition's first ``acks=all`` Produce is held)."""
    config: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"--broker-config: expected key=value, got {item!r}")
        config[key.strip()] = value.strip()
    return config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", choices=(*SCENARIOS, "all"), metavar="SCENARIO",
                   help=f"one of {', '.join(SCENARIOS)}, or all")
    p.add_argument("--quick", action="store_true", help="short scenarios (all of them in a few minutes)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"directory for bench.json, table.txt and the PNGs "
                   f"(default {DEFAULT_OUT})")
    p.add_argument("--seed", type=int, default=1, help="fixes values and fault scripts (default 1)")
    p.add_argument("--clients", type=parse_clients, default=None,
                   help=f"comma-separated subset of {','.join(CLIENT_NAMES)} (default: {','.join(DEFAULT_CLIENTS)}, "
                   "and java too with --harness apache; java needs a JDK 17+ and Maven for kafka-clients)")
    p.add_argument("--load", choices=LOADS, default=DEFAULT_LOAD,
                   help="the failure scenarios' idiom: tasks, one task per record awaiting the client's "
                   "send-and-wait (akresil send, aiokafka send_and_wait, confluent-kafka a loop future resolved "
                   "by its delivery callback); callbacks, hand-over plus the client's delivery callback "
                   f"(akresil enqueue(on_delivery=), aiokafka send + add_done_callback, confluent-kafka "
                   f"produce(on_delivery=)); default {DEFAULT_LOAD}")
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.freeze() after each client's warm-up, as a long-running service does after start-up: "
                   "Python's full collections then scan only what the load keeps alive (failure scenarios)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every scenario this many times (seeds SEED, SEED+1, ..., the client order rotating "
                   "each round) and report each client's median and worst round (default 1)")
    p.add_argument("--warmup-rounds", type=int, default=None, metavar="N",
                   help="untimed rounds of every client before the counted ones, their figures discarded: the "
                   "brokers' JIT and page cache warm up in them rather than in the first counted rounds (default "
                   f"{STEADY_WARMUP_ROUNDS} for steady, 0 for the failure scenarios, whose own warm-up suffices)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib needed)")
    p.add_argument("--update-docs", metavar="PAGE", type=Path,
                   help="also replace the table between this harness's bench markers of this markdown page "
                   "(<!-- bench:begin/end --> for the proxy, <!-- bench-mock:begin/end --> for the mock)")
    p.add_argument("--bootstrap-servers", default=None,
                   help="use this broker instead of starting an embedded Tansu (proxy harness only)")
    p.add_argument("--broker-config", type=parse_broker_config, default={}, metavar="K=V,...",
                   help="server.properties entries for every broker (apache harness only), e.g. "
                   "replica.fetch.wait.max.ms=100,replica.fetch.backoff.ms=100")
    p.add_argument("--harness", choices=tuple(report.HARNESSES), default="proxy",
                   help="proxy: FaultProxy in front of an embedded Tansu (default); mock: librdkafka's mock "
                   f"cluster, which cannot express {' or '.join(MOCK_SKIPS)} (skipped there); apache: Apache "
                   "Kafka itself (3 brokers and a controller started for the run; needs Java 17+ and Maven), "
                   f"which cannot express {' or '.join(APACHE_SKIPS)}")


class _ApacheCluster:
    """The Apache Kafka cluster of a ``--harness apache`` run (started for the run, stopped after it)."""

    def __init__(self, broker_config: dict[str, str]) -> None:
        from ..testing.kafka_cluster import KafkaCluster
        self.cluster = KafkaCluster(brokers=3, broker_config=broker_config)

    async def __aenter__(self) -> Any:
        await self.cluster.__aenter__()
        return self.cluster

    async def __aexit__(self, *exc: object) -> None:
        await self.cluster.__aexit__(*exc)


def round_plan(scenario: str, rounds: int, warmup_rounds: int | None, clients: Sequence[str],
               seed: int) -> list[tuple[bool, int, list[str]]]:
    """Each round as (counted, seed, client order): the warm-up rounds first (seeds below ``seed``), then the
    counted ones (seeds ``seed``, ``seed + 1``, ...); the client order rotates every counted round."""
    if warmup_rounds is None:
        warmup_rounds = STEADY_WARMUP_ROUNDS if scenario == "steady" else 0
    plan = [(False, seed - warmup_rounds + w, list(clients)) for w in range(warmup_rounds)]
    for r in range(rounds):
        plan.append((True, seed + r, list(clients[r % len(clients):]) + list(clients[:r % len(clients)])))
    return plan


def skips(harness: str) -> dict[str, str]:
    """Scenarios a harness cannot express, and why."""
    return {"mock": MOCK_SKIPS, "apache": APACHE_SKIPS}.get(harness, {})


def _broker(args: argparse.Namespace) -> contextlib.AbstractAsyncContextManager[Any]:
    """The Tansu broker behind the proxy, or the Apache Kafka cluster of the run; the mock harness starts a mock
    cluster per client phase instead."""
    if args.harness == "apache":
        return _ApacheCluster(args.broker_config)
    return Broker(args.bootstrap_servers) if args.harness == "proxy" else contextlib.nullcontext(None)


async def _run_failure(args: argparse.Namespace, broker: Any, sc: Scenario, client: str, seed: int,
                       progress: Progress) -> tuple[dict[str, Any], dict[str, Any]]:
    if args.harness == "apache":
        from .apache_runner import run_failure_on_apache
        return await run_failure_on_apache(broker, sc, client, seed, progress)
    if args.harness == "mock":
        from .mock_runner import run_failure_on_mock     # the binding is needed only when the mock is asked for
        return await run_failure_on_mock(sc, client, seed, progress)
    assert broker is not None
    return await run_failure(broker, sc, client, seed, progress)


async def run(args: argparse.Namespace, progress: Progress | None = None) -> dict[str, Any]:
    """Run the chosen scenarios for every chosen client; write and return the JSON document."""
    if args.rounds < 1:
        raise BenchArgumentError(f"--rounds: needs at least 1, got {args.rounds}")
    if args.warmup_rounds is not None and args.warmup_rounds < 0:
        raise BenchArgumentError(f"--warmup-rounds: needs 0 or more, got {args.warmup_rounds}")
    if args.update_docs is not None and not args.update_docs.is_file():
        raise FileNotFoundError(f"--update-docs: {args.update_docs} does not exist")
    if args.harness != "proxy" and args.bootstrap_servers:
        raise BenchArgumentError(f"--bootstrap-servers: the {args.harness} harness starts its own cluster; "
                                 "drop it or use --harness proxy")
    if args.broker_config and args.harness != "apache":
        raise BenchArgumentError(f"--broker-config: only the apache harness starts brokers it can configure, not "
                                 f"{args.harness}; drop it or use --harness apache")
    if not args.no_plots:
        from .plots import require
        require()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)   # it logs every retry at WARNING
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    clients: Sequence[str] = args.clients or (CLIENT_NAMES if args.harness == "apache" else DEFAULT_CLIENTS)
    progress = progress or Progress()
    results: dict[str, Any] = {}
    started = time.monotonic()
    with progress:
        async with _broker(args) as broker:
            for name in names:
                if name in skips(args.harness):
                    results[name] = {"skipped": skips(args.harness)[name]}
                    progress.note(f"{name}: skipped: {skips(args.harness)[name]}")
                    continue
                t0 = time.monotonic()
                per: dict[str, dict[str, Any]] = {c: {"rounds": []} for c in clients}
                scenario: dict[str, Any] = {}
                plan = round_plan(name, args.rounds, args.warmup_rounds, clients, args.seed)
                for counted, seed, order in plan:
                    if not counted:
                        progress.note(f"{name}: warm-up round (seed {seed}), not counted")
                    for c in order:
                        if name == "steady":
                            assert broker is not None    # steady is not run on the mock (MOCK_SKIPS)
                            cfg = steady_config(quick=args.quick)
                            if args.harness == "apache":
                                from .apache_runner import run_steady_on_apache
                                summary = await run_steady_on_apache(broker, cfg, c, seed, progress)
                            else:
                                summary = await run_steady(broker, cfg, c, seed, progress)
                            scenario = cfg.as_dict()
                        else:
                            sc = build(name, quick=args.quick, seed=seed, load=args.load, gc_freeze=args.gc_freeze)
                            if args.harness == "apache":
                                from .apache_runner import for_apache
                                sc = for_apache(sc)
                            summary, series = await _run_failure(args, broker, sc, c, seed, progress)
                            if counted and seed == args.seed:   # the first counted seed's script is described
                                scenario = sc.as_dict()
                                per[c]["series"] = series
                        if counted:
                            per[c]["rounds"].append(summary)
                for c in clients:
                    per[c]["summary"] = report.combine_rounds(per[c]["rounds"])
                    per[c]["worst"] = report.worst_of(name, per[c]["rounds"], args.harness)
                    if args.rounds == 1:
                        del per[c]["rounds"]
                results[name] = {"scenario": scenario, "clients": per,
                                 "ratios": report.ratios(name, {c: v["summary"] for c, v in per.items()},
                                                         harness=args.harness)}
                results[name]["warmup_rounds"] = sum(1 for counted, _, _ in plan if not counted)
                results[name]["wall_s"] = round(time.monotonic() - t0, 1)
                progress.note(headline(name, results[name]))
    doc = report.document(seed=args.seed, quick=args.quick, env=report.environment(), scenarios=results,
                          harness=args.harness)
    doc["rounds"] = args.rounds
    if args.broker_config:
        doc["broker_config"] = args.broker_config
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


__all__ = ["FAILURE_SCENARIOS", "SCENARIOS", "BenchArgumentError", "add_arguments", "parse_broker_config",
           "parse_clients", "round_plan", "run"]
