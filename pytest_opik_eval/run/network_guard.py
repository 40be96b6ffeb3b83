"""The network guard of strict replay (``--eval-record=none``): a TCP connection no HTTP library
vcrpy patches would make (a raw socket, an unpatched client) is refused inside a trial, and
outside any where the recorder refuses it; and the addresses of the hosts left alone, which a
socket connects to.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from pytest_opik_eval.option_values import Host, host_text


class _Guarded(Protocol):
    """What the guard asks of the recorder (``recording.Recorder``)."""

    def refuses(self, host: str | None, port: int | None) -> bool: ...
    def refused(self, request: str, host: str) -> None: ...
    def allows(self, host: str | None, port: int | None) -> bool: ...


class _Trial(Protocol):
    """What the guard asks of a trial's recording scope (``recording.TrialScope``)."""

    blocks_network: bool

    def blocked(self, address: Any) -> None: ...


def with_addresses(hosts: Sequence[Host]) -> frozenset[Host]:
    """The hosts, and the addresses their names resolve to (a socket connects to an address)."""
    found = set(hosts)
    for name, port in hosts:
        try:
            addresses = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):  # not resolvable here: matched by name only
            continue
        found.update((str(address[4][0]), port) for address in addresses)
    return frozenset(found)


@contextlib.contextmanager
def socket_guard(recorder: _Guarded, current: Callable[[], _Trial | None]) -> Iterator[None]:
    """Mode ``none``: an internet TCP socket's connect is refused (a library vcrpy does not patch,
    a raw socket) inside a trial, and outside any where the recorder's ``refuses`` it; a host let
    through is left alone."""
    from unittest import mock

    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def blocked(sock: socket.socket, address: Any) -> bool:
        # TCP only: a datagram socket's connect sends nothing (a metrics client, a UDP exporter).
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return False
        host, port = str(address[0]), int(address[1])
        scope = current()
        if scope is None:
            if not recorder.refuses(host, port):
                return False
            recorder.refused(f"CONNECT {host_text(host, port)}", host_text(host, port))
            return True
        if not scope.blocks_network or recorder.allows(host, port):
            return False
        scope.blocked(address)
        return True

    def connect(sock: socket.socket, address: Any) -> None:
        if blocked(sock, address):
            raise ConnectionRefusedError(
                f"opik-eval: --eval-record=none blocks connecting to {address}: strict replay sends nothing "
                "it cannot replay (let a local service through with --eval-record-allow-host=HOST:PORT)"
            )
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        if blocked(sock, address):
            import errno

            return errno.ECONNREFUSED
        return real_connect_ex(sock, address)

    with (
        mock.patch.object(socket.socket, "connect", connect),
        mock.patch.object(socket.socket, "connect_ex", connect_ex),
    ):
        yield
