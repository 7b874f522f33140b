"""A TCP front for the test server's Unix socket that can be cut, for the tests of what a
holder does when its connection goes: a server that restarts, a proxy or pooler sidecar
that restarts, a network that drops every packet for a while."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class Relay:
    """Every connection through it passed on to `target`, until cut: then each is closed on
    both sides at once, and new ones are closed as they come until restore(); close()
    refuses them for good. Held (hold(), until flow()), nothing passes either way, an end
    included, as through a network that drops every packet: TCP delivers it all after."""

    def __init__(self, target: str, port: int = 0) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", port), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.flowing = threading.Event()
        self.flowing.set()
        self.open: list[tuple[socket.socket, socket.socket]] = []
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
            server.connect(self.target)
            with self._lock:
                self.open.append((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self.flowing.wait()
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
