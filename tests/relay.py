"""A TCP front for the test server's Unix socket that can be cut, for the tests of what a
holder does when its connection goes: a server that restarts, a proxy or pooler sidecar
that restarts, a network that drops every packet for a while, or loses the reply to one
statement; and a front whose target changes (a failover behind a virtual IP)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class Relay:
    """Every connection through it passed on to `target`, until cut: then each is closed on
    both sides at once, and new ones are closed as they come until restore(); close()
    refuses them for good. Held (hold(), until flow()), nothing passes either way, an end
    included, as through a network that drops every packet: TCP delivers it all after.
    `target` may change: new connections go to the new one. mute_after(marker): on the
    first connection whose client sends `marker` (a statement's text), nothing the server
    says from then on reaches the client (`muted` is set): its reply is lost."""

    def __init__(self, target: str, port: int = 0) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", port), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.flowing = threading.Event()
        self.flowing.set()
        self.muted = threading.Event()
        self._marker: bytes | None = None
        self.open: list[tuple[socket.socket, socket.socket]] = []
        # How many connections it has passed on (a test counts a host's connections).
        self.connections = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            try:
                server.connect(self.target)
            except OSError:
                # The target is down (a dead primary): refused, as a VIP with no one behind.
                _close(client, server)
                continue
            with self._lock:
                self.open.append((client, server))
                self.connections += 1
            mute = threading.Event()
            for source, sink, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, upstream, mute),
                                 daemon=True).start()

    def mute_after(self, marker: bytes) -> None:
        self._marker = marker

    def _pump(self, source: socket.socket, sink: socket.socket, upstream: bool,
              mute: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self.flowing.wait()
                if upstream and self._marker is not None and self._marker in data:
                    self._marker = None
                    mute.set()
                    self.muted.set()
                if mute.is_set() and not upstream:
                    continue
                sink.sendall(data)
        # An end on one side is passed on, as a proxy does (a dead client's backend ends).
        self.flowing.wait()
        _close(source, sink)

    def hold(self) -> None:
        self.flowing.clear()

    def flow(self) -> None:
        self.flowing.set()

    def cut(self, *, reset: bool = False) -> None:
        """Close every connection through it, the client's end with an RST if `reset` (a
        restarting HAProxy), else a FIN (a restarting server)."""
        self.down.set()
        with self._lock:
            pairs, self.open = self.open, []
        for client, server in pairs:
            if reset:
                # SO_LINGER 0: close sends an RST, not a FIN.
                with contextlib.suppress(OSError):
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
            _close(client, server)

    def restore(self) -> None:
        self.down.clear()

    def close(self, *, reset: bool = False) -> None:
        """Refuse every connection from now on, and cut those through it."""
        # shutdown, not close alone, ends the accept() blocked on it.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut(reset=reset)


def _close(*ends: socket.socket) -> None:
    for end in ends:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()
