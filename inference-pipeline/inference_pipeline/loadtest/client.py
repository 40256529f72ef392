"""A minimal asyncio HTTP/1.1 client with keep-alive, for the load generator.

Why not aiohttp or threads: a load generator on a 2-core machine must cost as little CPU as
possible per request, and it only ever talks to a loopback server with known answers
(Content-Length or chunked bodies). One ``Connection`` is used by one worker at a time.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
import urllib.parse


class LoopbackOnlyError(ValueError):
    """The URL does not point at this machine."""


def loopback_address(url: str) -> tuple[str, int]:
    """(host, port) of an http:// URL on loopback; anything else is refused."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise LoopbackOnlyError(f"{url!r}: expected http://HOST:PORT")
    host = parts.hostname
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        raise LoopbackOnlyError(f"{url!r}: cannot resolve {host!r}") from None
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        raise LoopbackOnlyError(f"{url!r}: load tests may only target loopback (127.0.0.1)")
    return host, parts.port or 80


def token_events(part: bytes) -> int:
    """OpenAI streaming chunks in ``part`` that carry tokens: ``"finish_reason": null`` (the
    closing chunk names its reason, the usage chunk has no choices, ``[DONE]`` is no JSON).
    What time-to-first-token and inter-token latency are measured on."""
    events = part.split(b"\n\n")
    return sum(e.startswith(b"data: {") and b'"finish_reason": null' in e for e in events)


class Connection:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closed it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        self._reader = self._writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) of one POST; raises OSError/IncompleteReadError on failure."""
        return await self._exchange(path, body, None)

    async def post_stream(self, path: str, body: bytes, arrivals: list[float]) -> tuple[int, bytes]:
        """POST to a Server-Sent Events route: appends the arrival time (perf_counter) of each
        ``data:`` event to ``arrivals`` as it is read; returns (status, whole body)."""
        return await self._exchange(path, body, arrivals)

    async def _exchange(
        self, path: str, body: bytes, arrivals: list[float] | None
    ) -> tuple[int, bytes]:
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        try:
            self._writer.write(head.encode() + body)
            return await self._read_response(arrivals)
        except BaseException:
            await self.close()  # a half-read response would poison the next request
            raise

    async def _read_response(self, arrivals: list[float] | None) -> tuple[int, bytes]:
        reader = self._reader
        status_line = await reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length, chunked, keep_alive = None, False, True
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
            elif name == "connection" and value == "close":
                keep_alive = False
        if chunked:
            body = await self._read_chunked(arrivals if status == 200 else None)
        elif length is not None:
            body = await reader.readexactly(length)
        else:
            body, keep_alive = await reader.read(), False
        if not keep_alive:
            await self.close()
        return status, body

    async def _read_chunked(self, arrivals: list[float] | None) -> bytes:
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            part = await self._reader.readexactly(size)
            if arrivals is not None:  # a server sends each SSE event as it is produced
                now = time.perf_counter()
                arrivals.extend(now for _ in range(token_events(part)))
            parts.append(part)
            await self._reader.readexactly(2)
