"""``FaultProxyProcess``: a ``FaultProxy`` in its own process, scripted through the same synchronous calls.

Why: a ``FaultProxy`` started in the measuring process shares its interpreter with the client under test. Its
thread competes for the GIL, and its recordings (every request and response of a run) and asyncio objects sit in
the same heap that the cyclic GC's full collections scan; both slow a Python client in ways a real broker never
would, and not a C client (confluent-kafka) at all. In a process of its own the proxy costs the client what a
broker does: nothing but the network. ``time.monotonic`` is system-wide, so recorded times compare with the
caller's.

Every public synchronous method and property of ``FaultProxy`` is forwarded (``proxy.stop_node(2)``,
``proxy.requests(...)``, ``proxy.bootstrap_servers``); ``proxy.recorder.clear()`` works too. Results and
exceptions travel back pickled.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

_START_TIMEOUT_S = 60.0


def _serve(conn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The child: start the proxy, then answer ``(path, args, kwargs)`` calls until ``None`` arrives."""
    from .proxy import FaultProxy
    try:
        proxy = FaultProxy(*args, **kwargs)
        proxy.start()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", exc))
        return
    conn.send(("ok", None))
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg is None:
                break
            path, call_args, call_kwargs, call = msg
            try:
                target: Any = proxy
                for part in path.split("."):
                    target = getattr(target, part)
                result = target(*call_args, **call_kwargs) if call else target
                conn.send(("ok", result))
            except BaseException as exc:  # noqa: BLE001 - the caller's exception, raised in the parent
                conn.send(("error", exc))
    finally:
        proxy.stop()


class _Remote:
    """An attribute path inside the child's proxy: call it, or read it with ``value()``."""

    def __init__(self, owner: FaultProxyProcess, path: str) -> None:
        self._owner, self._path = owner, path

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(self._owner, f"{self._path}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner._call(self._path, args, kwargs, call=True)


class FaultProxyProcess:
    """``FaultProxy(*args, **kwargs)`` run in a child process (spawned: no fork of a running event loop)."""

    #: plain attributes and properties read as values, not forwarded as calls
    _VALUES = frozenset({"bootstrap_servers", "node_ids", "open_connections"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._conn: Any = None
        self._process: Any = None
        self._lock = threading.Lock()          # one call at a time on the pipe (callers may use threads)
        self._cache: dict[str, Any] = {}

    def start(self) -> FaultProxyProcess:
        if self._process is not None:
            raise RuntimeError("FaultProxyProcess already started")
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, self._args, self._kwargs), daemon=True,
                                    name="akresil-fault-proxy")
        self._process.start()
        child.close()
        self._conn = parent
        if not parent.poll(_START_TIMEOUT_S):
            self._kill()
            raise TimeoutError(f"FaultProxyProcess: the proxy did not start within {_START_TIMEOUT_S:.0f} s")
        status, value = parent.recv()
        if status == "error":
            self._kill()
            raise value
        return self

    def stop(self) -> None:
        if self._process is None:
            return
        try:
            with self._lock:
                self._conn.send(None)
            self._process.join(10)
        except (OSError, EOFError):
            pass
        finally:
            self._kill()

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def __enter__(self) -> FaultProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, call: bool) -> Any:
        if self._conn is None:
            raise RuntimeError("FaultProxyProcess is not running: call start() first")
        with self._lock:
            self._conn.send((path, args, kwargs, call))
            status, value = self._conn.recv()
        if status == "error":
            raise value
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._VALUES:
            if name not in self._cache:       # fixed for the proxy's lifetime except open_connections
                value = self._call(name, (), {}, call=False)
                if name == "open_connections":
                    return value
                self._cache[name] = value
            return self._cache[name]
        return _Remote(self, name)
