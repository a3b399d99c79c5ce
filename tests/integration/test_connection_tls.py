"""TLS: akresil's Connection through a TLS-terminating proxy in front of Tansu (Tansu 0.6 cannot serve TLS).

The certificate is a throwaway self-signed one made with the openssl CLI; the test is skipped without it.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Awaitable, Callable

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener

from akresil import errors
from akresil.net.connection import Connection
from akresil.protocol.api import CLIENT_VERSIONS, ApiKey
from akresil.testing import EmbeddedBroker

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


async def via_tls_proxy(broker: EmbeddedBroker, cert: Path, key: Path,
                        body: Callable[[int], Awaitable[None]]) -> None:
    """Accept TLS on a free port and pipe plaintext to the broker, for the duration of ``body``."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def pipe(src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream) -> None:
        try:
            async for chunk in src:
                await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            pass
        finally:
            await anyio.aclose_forcefully(dst)

    async def handle(client: anyio.abc.ByteStream) -> None:
        upstream = await anyio.connect_tcp(broker.host, broker.port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipe, client, upstream)
            tg.start_soon(pipe, upstream, client)

    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = tcp.extra(SocketAttribute.local_port)
    listener = TLSListener(tcp, server_ctx, standard_compatible=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            with anyio.fail_after(15):
                await body(port)
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_tls_connection_negotiates_and_pipelines(broker: EmbeddedBroker, certificate: tuple[Path, Path],
                                                 backend: str) -> None:
    cert, key = certificate

    async def body(port: int) -> None:
        ctx = ssl.create_default_context(cafile=str(cert))
        async with await Connection.connect("127.0.0.1", port, ssl_context=ctx) as conn:
            assert conn.versions[ApiKey.PRODUCE] == min(CLIENT_VERSIONS[ApiKey.PRODUCE][1],
                                                        conn.api_ranges[ApiKey.PRODUCE][1])
            results = []

            async def one() -> None:
                results.append(await conn.request(ApiKey.METADATA, {
                    "topics": [], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}))

            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(one)
            assert len(results) == 20 and all(r["brokers"] for r in results)

    anyio.run(lambda: via_tls_proxy(broker, cert, key, body), backend=backend)


def test_untrusted_certificate_is_a_non_retriable_authentication_error(
        broker: EmbeddedBroker, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate

    async def body(port: int) -> None:
        ctx = ssl.create_default_context()  # system CAs: the self-signed cert is not trusted
        with pytest.raises(errors.AuthenticationError, match=f"TLS handshake with node 0 at 127.0.0.1:{port}") as info:
            await Connection.connect("127.0.0.1", port, ssl_context=ctx, node_id=0)
        assert not info.value.retriable

    anyio.run(lambda: via_tls_proxy(broker, cert, key, body))


def test_hostname_mismatch_is_rejected(broker: EmbeddedBroker, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate

    async def body(port: int) -> None:
        ctx = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(errors.AuthenticationError, match="TLS handshake"):
            await Connection.connect("127.0.0.1", port, ssl_context=ctx, server_hostname="kafka.example.com")

    anyio.run(lambda: via_tls_proxy(broker, cert, key, body))
