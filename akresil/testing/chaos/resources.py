"""What a soak checks is left behind: asyncio tasks and open file descriptors of this process (sockets named by
their ports, so the fault proxy's own connections are told apart)."""

from __future__ import annotations

import asyncio
import os
from typing import Iterable, Mapping, NamedTuple

__all__ = ["ResourceSnapshot", "leaked_fds", "tcp_sockets"]


class ResourceSnapshot(NamedTuple):
    """Live asyncio tasks (names by id) and open fds (fd -> readlink target) of this process."""

    tasks: Mapping[int, str]
    fds: Mapping[int, str]

    @classmethod
    def take(cls) -> ResourceSnapshot:
        current = asyncio.current_task()
        tasks = {id(t): t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done()}
        fds: dict[int, str] = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
            except OSError:   # the listing's own fd, or closed meanwhile
                continue
        return cls(tasks, fds)


def tcp_sockets() -> dict[str, tuple[int, int, str]]:
    """socket inode -> (local port, remote port, state hex) from /proc/self/net/tcp{,6}."""
    table: dict[str, tuple[int, int, str]] = {}
    for path in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10:
                continue
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            table[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state)
    return table


def leaked_fds(before: Mapping[int, str], after: Mapping[int, str], *, sockets: Mapping[str, tuple[int, int, str]],
               harness_ports: Iterable[int], upstream_port: int) -> list[str]:
    """Fds open after that were not before, minus the fault proxy's own sockets (its listeners and accepted
    connections are on ``harness_ports``; its upstream connections go to ``upstream_port``)."""
    ports = set(harness_ports)
    leaked = []
    for fd, target in sorted(after.items()):
        if before.get(fd) == target:
            continue
        if target.startswith("socket:["):
            info = sockets.get(target[8:-1])
            if info is not None and (info[0] in ports or info[1] == upstream_port):
                continue
            if info is not None:
                target = f"{target} local:{info[0]} remote:{info[1]} state:{info[2]}"
        leaked.append(f"fd {fd} -> {target}")
    return leaked
