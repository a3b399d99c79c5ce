"""PNG plots of a run: per failure scenario, throughput, the p99 latency (from the scheduled time) of the records
scheduled in each second on the partitions the faulty node does not lead, and the scenario's wire metric over
time, one line per client, fault windows shaded and instantaneous faults (leader moves) as vertical lines; for
``steady``, bars of msg/s per client.  Titles name the harness; scenarios the harness skipped get no plot.
matplotlib is imported here only, with the Agg backend, so the rest of ``akresil bench`` works without it until
plots are asked for.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from .report import HARNESSES

#: the wire metric shown in the third panel of each failure scenario: (series key, axis label)
THIRD_PANEL: dict[str, tuple[str, str]] = {
    "leader-move": ("metadata_requests_per_s", "Metadata requests/s"),
    "throttle": ("requests_in_throttle_window_per_s", "requests/s inside throttle windows"),
    "broker-bounce": ("connect_attempts_per_s", "connects/s to the stopped node"),
    "retry-storm": ("produce_requests_to_node_per_s", "Produce requests/s to the failing node"),
}
#: librdkafka's mock logs no connection attempts: its bounce panel shows Produce requests to the bounced node
MOCK_THIRD_PANEL: dict[str, tuple[str, str]] = {
    **THIRD_PANEL, "broker-bounce": ("produce_requests_to_node_per_s", "Produce requests/s to the bounced node")}
COLORS = {"akresil": "tab:blue", "aiokafka": "tab:orange", "confluent": "tab:green", "java": "tab:purple"}


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require() -> None:
    """Fail before a long run, not after it, when plots cannot be drawn."""
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable("plots need matplotlib: pip install 'akresil[bench]' (or pass --no-plots)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_failure(name: str, result: Mapping[str, Any], path: Path, harness: str = "proxy") -> Path:
    plt = _pyplot()
    key, label = (MOCK_THIRD_PANEL if harness == "mock" else THIRD_PANEL)[name]
    # a harness that cannot see the wire metric (Apache Kafka: no proxy) gets no empty third panel
    wire = any(key in data["series"] for data in result["clients"].values())
    fig, axes = plt.subplots(3 if wire else 2, 1, figsize=(9, 8 if wire else 5.5), sharex=True)
    script = result["scenario"]["script"]
    for client, data in result["clients"].items():
        series = data["series"]
        xs = [i + 0.5 for i in range(len(series["acked_per_s"]))]
        color = COLORS.get(client)
        axes[0].plot(xs, series["acked_per_s"], label=client, color=color, marker=".")
        p99 = series.get("sched_p99_live_ms", series["p99_ms"])
        axes[1].plot(xs, [v if isinstance(v, (int, float)) and math.isfinite(v) else math.nan for v in p99],
                     label=client, color=color, marker=".")
        if wire and key in series:
            axes[2].plot(xs, series[key], label=client, color=color, marker=".")
    for ax in axes:
        for step in script["steps"]:
            if step["window_s"] > 0:
                ax.axvspan(step["at_s"], step["at_s"] + step["window_s"], color="tab:red", alpha=0.12)
            elif step["action"] != "clear":
                ax.axvline(step["at_s"], color="tab:red", alpha=0.5, linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("acked msg/s")
    axes[1].set_ylabel("p99 ms from schedule,\nlive partitions (gap: failed)")
    axes[1].set_yscale("symlog", linthresh=10)
    axes[1].set_ylim(bottom=0)                       # latencies: no negative decades on the axis
    if wire:
        axes[2].set_ylabel(label)
    axes[-1].set_xlabel("seconds into the run (red: fault)")
    axes[0].legend(loc="lower left")
    axes[0].set_title(f"akresil bench {name} ({HARNESSES[harness]})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_steady(result: Mapping[str, Any], path: Path) -> Path:
    plt = _pyplot()
    clients = list(result["clients"])
    sizes = list(result["scenario"]["sizes"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    width = 0.8 / max(1, len(clients))
    for ax, what in zip(axes, ("produce", "consume")):
        for i, client in enumerate(clients):
            vals = [result["clients"][client]["summary"].get(f"{size}B", {}).get(f"{what}_msg_per_s", 0)
                    for size in sizes]
            ax.bar([j + i * width for j in range(len(sizes))], vals, width, label=client, color=COLORS.get(client))
        ax.set_xticks([j + width * (len(clients) - 1) / 2 for j in range(len(sizes))],
                      [f"{s} B" for s in sizes])
        ax.set_title(f"{what} msg/s (through the proxy)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_all(doc: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """One PNG per scenario the document has figures for: ``<scenario>.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, result in doc["scenarios"].items():
        if "skipped" in result:
            continue
        path = out_dir / f"{name}.png"
        written.append(plot_steady(result, path) if name == "steady"
                       else plot_failure(name, result, path, doc["harness"]))
    return written
