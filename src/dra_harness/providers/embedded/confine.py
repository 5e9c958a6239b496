"""Run a server that binds every interface so that one loopback port is the only way to it.

The example driver's webhook listens on ``:<port>`` with no flag to choose the address, and
asks callers for no credentials; started as it is, it would face every network the host is on.
This process binds the port we chose on 127.0.0.1 in the host's network namespace, then moves
itself into a new network namespace that holds nothing but a loopback interface, starts the
server there, and relays each connection from the host's loopback port to it, byte for byte
(TLS passes through untouched). The server is its child, in the same process group, so the
supervisor stops both with one signal; if the server exits, so does this.

Usage: ``python -m dra_harness.providers.embedded.confine --listen PORT --to PORT -- COMMAND...``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading

CLONE_NEWNET = 0x40000000


def _unshare_network() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy one direction until its end, then half-close the other side (the reply may still come)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for s in (src, dst):
            s.close()


def _relay(listener: socket.socket, port: int) -> None:
    while True:
        conn, _ = listener.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            conn.close()
            continue
        upstream.settimeout(None)
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="confine", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True, help="the port on the host's 127.0.0.1")
    parser.add_argument("--to", type=int, required=True, help="the port the server listens on, in its namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no server command given")
    listener = socket.create_server(("127.0.0.1", args.listen))  # in the host's namespace: bound before we leave it
    _unshare_network()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    server = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    threading.Thread(target=_relay, args=(listener, args.to), daemon=True).start()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
