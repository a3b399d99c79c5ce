"""``AkresilInstrumentor``: OpenTelemetry auto-instrumentation for akresil (``pip install 'akresil[otel]'``).

``opentelemetry-instrument python app.py`` finds it through the ``opentelemetry_instrumentor`` entry point and
calls ``instrument()``; an application may call it itself::

    from akresil.otel_instrumentor import AkresilInstrumentor
    AkresilInstrumentor().instrument(tracer_provider=provider)   # optional: propagator=...

``instrument()`` gives ``Producer``, ``Consumer`` and ``ShareConsumer`` the traced methods of their subclasses in
``akresil.otel`` (``TracedProducer.send`` becomes ``Producer.send``, ...), so every client, made before or after,
is traced and stays of its own type; ``uninstrument()`` puts the original methods back.  A client given its own
providers by ``instrument_producer`` & co. keeps them.
"""

from __future__ import annotations

from typing import Any, Collection

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import otel

__all__ = ["AkresilInstrumentor"]

#: (class, name) -> the class's own function before instrument() (module-level: BaseInstrumentor is a
#: singleton whose __init__ runs again on every ``AkresilInstrumentor()``)
_originals: dict[tuple[type, str], Any] = {}


class AkresilInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces akresil's producers, consumers and share consumers (``akresil.otel`` describes the spans)."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("akresil",)     # it ships inside akresil: any installed version is the one it instruments

    def _instrument(self, **kwargs: Any) -> None:
        otel.set_default_tracing(kwargs.get("tracer_provider"), kwargs.get("propagator"))
        for cls, traced, names in otel.TRACED_METHODS:
            for name in names:
                _originals[(cls, name)] = cls.__dict__[name]
                setattr(cls, name, traced.__dict__[name])

    def _uninstrument(self, **kwargs: Any) -> None:
        for (cls, name), original in _originals.items():
            setattr(cls, name, original)
        _originals.clear()
        otel.set_default_tracing()
