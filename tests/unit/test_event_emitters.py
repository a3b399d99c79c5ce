"""Every event ``core/events.py`` names has an emitter in the package: a series fed by an event nobody emits is a
documented metric without samples (the ``rebalance`` events had none until issue 32)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

import akresil
from akresil.core import events
from akresil.core.group_session import RebalanceEvent, RebalanceFailedEvent
from akresil.types import TopicPartition

PACKAGE = Path(akresil.__file__).resolve().parent
#: the constants of core/events.py by name, and the event names they hold
CONSTANTS = {name: value for name, value in vars(events).items() if isinstance(value, str) and value in events.ALL_EVENTS}


def _event_names(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """Names bound in a module to event constants (``from .core.events import X as Y``, or a module constant
    holding an event's name) and the names under which it imported the events module itself
    (``from . import events``, ``... as ev``)."""
    constants: dict[str, str] = {}
    modules: set[str] = set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and node.value.value in events.ALL_EVENTS):
            constants.update((t.id, str(node.value.value)) for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        for alias in node.names:
            bound = alias.asname or alias.name
            if module.endswith("events") and alias.name in CONSTANTS:
                constants[bound] = CONSTANTS[alias.name]
            elif alias.name == "events":
                modules.add(bound)
    return constants, modules


def _emitted(path: Path) -> set[str]:
    """Event names ``path`` emits: ``<x>.emit(EVENT, ...)`` or ``partial(<x>.emit, EVENT)``."""
    return {name for name, _ in _emit_calls(path)}


def _emit_calls(path: Path) -> list[tuple[str, frozenset[str] | None]]:
    """Each emit in ``path``: the event and the field names it passes (None: some come from ``**mapping``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants, modules = _event_names(tree)

    def event_of(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Name):
            return constants.get(arg.id)
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id in modules:
            return CONSTANTS.get(arg.attr)
        if isinstance(arg, ast.Constant) and arg.value in events.ALL_EVENTS:
            return str(arg.value)
        return None

    def fields(call: ast.Call) -> frozenset[str] | None:
        names = [k.arg for k in call.keywords]
        return None if None in names else frozenset(str(n) for n in names)

    found: list[tuple[str, frozenset[str] | None]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "emit" and node.args:
            name = event_of(node.args[0])
            if name is not None:
                found.append((name, fields(node)))
        for before, arg in zip(node.args, node.args[1:]):
            if isinstance(before, ast.Attribute) and before.attr == "emit":
                name = event_of(arg)
                if name is not None:
                    found.append((name, fields(node)))
    return found


def _package_emits() -> list[tuple[str, frozenset[str] | None, Path]]:
    return [(name, names, path) for path in PACKAGE.rglob("*.py")
            if path.name != "events.py" and ".emit" in path.read_text(encoding="utf-8")
            for name, names in _emit_calls(path)]


def _declared(event: str) -> set[str]:
    """The fields ``Hook.on_<event>`` declares."""
    handler = getattr(events.Hook, "on_" + event)
    return set(inspect.signature(handler).parameters) - {"self"}


def test_every_event_has_an_emitter_in_the_package() -> None:
    emitted = {name for name, _, _ in _package_emits()}
    assert events.ALL_EVENTS - emitted == set(), "events nobody emits (their series stay empty)"


def test_hook_declares_one_typed_handler_per_event() -> None:
    handlers = {name.removeprefix("on_") for name in vars(events.Hook) if name.startswith("on_")} - {"event"}
    assert handlers == set(events.ALL_EVENTS)
    hints = typing.get_type_hints(events.Hook.on_batch_sent, localns={"TopicPartition": TopicPartition})
    assert hints["topic"] is str and hints["queue_ms"] is float


def test_every_emit_passes_the_fields_its_hook_handler_declares() -> None:
    # a hook subclassing Hook is type-checked against these declarations: an emitter that drifts from them
    # would hand a checked hook a field it does not take (a TypeError the registry only logs)
    wrong = [(name, sorted(names ^ _declared(name)), str(path.relative_to(PACKAGE)))
             for name, names, path in _package_emits() if names is not None and names != _declared(name)]
    assert wrong == []
    # the rebalance events are built as TypedDicts in core.group_session and emitted with **
    assert set(RebalanceEvent.__annotations__) == _declared(events.REBALANCE)
    assert set(RebalanceFailedEvent.__annotations__) == _declared(events.REBALANCE_FAILED)


def test_hook_declarations_are_never_called_and_overrides_are() -> None:
    class Counting(events.Hook):
        def __init__(self) -> None:
            self.sent: list[int] = []

        def on_batch_sent(self, *, records: int, **_: object) -> None:
            self.sent.append(records)

    hooks = events.Hooks([Counting()])
    assert hooks._handlers(events.BATCH_SENT) and hooks._handlers(events.REQUEST_SENT) == ()
    with pytest.raises(TypeError, match="neither on_event nor any on_<event>"):
        events.Hooks([events.Hook()])


def test_the_scan_sees_each_way_an_event_is_emitted(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from functools import partial\n"
                      "from .core.events import REBALANCE as R, CLIENT_CLOSED\n"
                      "from .core import events as ev\n"
                      "SENT = 'connection_bytes_sent'\n"
                      "def f(hooks):\n"
                      "    hooks.emit(R, group_id='g')\n"
                      "    hooks.emit(ev.THROTTLED, node_id=1)\n"
                      "    hooks.emit('node_state', node_id=1)\n"
                      "    hooks.emit(SENT, nbytes=1)\n"
                      "    return partial(hooks.emit, CLIENT_CLOSED)\n"
                      "def g(hooks):\n"
                      "    hooks.emit(OTHER)\n", encoding="utf-8")
    assert _emitted(module) == {events.REBALANCE, events.THROTTLED, events.NODE_STATE, events.CLIENT_CLOSED,
                                events.CONNECTION_BYTES_SENT}
