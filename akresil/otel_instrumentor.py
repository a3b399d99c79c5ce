"""``AkresilInstrumentor``: OpenTelemetry auto-instrumentation for akresil (``pip install 'akresil[otel]'``).

``opentelemetry-instrument python app.py`` finds it through the ``opentelemetry_instrumentor`` entry point and
calls ``instrument()``; an application may call it itself::

    from akresil.otel_instrumentor import AkresilInstrumentor
    AkresilInstrumentor().instrument(tracer_provider=provider)   # optional: propagator=...

``instrument()`` makes an ``akresil.otel.OTelTracing`` the default tracer hook (``core.tracing``): every
``Producer``, ``Consumer`` and ``ShareConsumer``, made before or after, that has no tracer of its own calls it
around its sends, polls and processing (and so does a ``Runner`` around its handler calls); ``uninstrument()``
takes it away.  No class or method is patched.  A client given its own tracer by ``instrument_producer`` & co.
keeps it.
"""

from __future__ import annotations

from typing import Any, Collection

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import otel

__all__ = ["AkresilInstrumentor"]


class AkresilInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces akresil's producers, consumers and share consumers (``akresil.otel`` describes the spans)."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("akresil",)     # it ships inside akresil: any installed version is the one it instruments

    def _instrument(self, **kwargs: Any) -> None:
        otel.set_default_tracing(kwargs.get("tracer_provider"), kwargs.get("propagator"))

    def _uninstrument(self, **kwargs: Any) -> None:
        otel.set_default_tracing(enabled=False)
