"""A small FastAPI-style order service: its POST handler publishes each order to Kafka and answers 201, or 503
when Kafka cannot take the order within the time the service promises its callers.

The retry policy lives in the producer's configuration, not in the handler: transient broker errors are
retried with exponential backoff (KIP-580) by an idempotent producer (a retry never writes a duplicate), and
``delivery_timeout_ms`` (KIP-91) bounds how long one order may take before the handler gives up.
examples/test_order_service.py tests exactly that with the akresil pytest plugin.

In a FastAPI app the handler is the body of ``@app.post("/orders", status_code=201)`` and the producer is
opened in the app's lifespan; this file keeps to the standard library so it runs anywhere.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from akresil import Producer
from akresil.errors import KafkaError

ORDERS_TOPIC = "orders"


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    amount_cents: int


@dataclass(frozen=True)
class Response:
    status_code: int
    body: dict[str, Any]


def make_producer(bootstrap_servers: str, *, delivery_timeout_ms: int = 5_000) -> Producer:
    """The service's producer: retries inside ``delivery_timeout_ms``, first retry after ~100 ms."""
    return Producer(bootstrap_servers=bootstrap_servers, client_id="order-service", linger_ms=0,
                    retry_backoff_ms=100, retry_backoff_max_ms=1_000, request_timeout_ms=1_000,
                    delivery_timeout_ms=delivery_timeout_ms)


class OrderService:
    """The service's one route, ``POST /orders``."""

    def __init__(self, producer: Producer, topic: str = ORDERS_TOPIC) -> None:
        self.producer = producer
        self.topic = topic

    async def create_order(self, order: Order) -> Response:
        if order.amount_cents <= 0:
            return Response(422, {"error": "amount_cents must be positive"})
        try:
            metadata = await self.producer.send(self.topic, json.dumps(asdict(order)).encode(),
                                                key=order.customer.encode())
        except KafkaError as exc:   # retries are exhausted: tell the caller to try again later
            return Response(503, {"error": type(exc).__name__})
        return Response(201, {"order_id": order.order_id, "partition": metadata.partition,
                              "offset": metadata.offset})
