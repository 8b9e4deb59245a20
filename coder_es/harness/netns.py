"""Under presets whose commands get no network, the harness still needs its model: the sandbox
gets a new network namespace (loopback only) and this forwarder, run inside it before the
harness, listens on the namespace's own ``127.0.0.1:PORT`` (the proxy's port on the host, so the
harness's base URL is unchanged) and relays each connection to the recording proxy's Unix socket,
bound into the namespace through the shared file system. The only way out is the recorded model
endpoint.

The forwarder is a small Python program (this interpreter, visible in the sandbox) that starts the
harness as its child, relays until the child exits, and exits with its status. File descriptors
are passed on (an ACP agent's stdin crosses it).
"""

from __future__ import annotations

import sys

FORWARDER = r"""
import socket, subprocess, sys, threading
path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def fail(why):
    sys.stderr.write(f"coder-es: the model route in the sandbox is broken ({why})\n")
    sys.stderr.flush()
# Checked before the harness starts: a route that cannot work is one clear line now, not a
# harness retrying a reset connection for minutes.
try:
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(path)
    probe.close()
except OSError as e:
    fail(f"{path}: {e.strerror or e}")
    sys.exit(125)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind(("127.0.0.1", port))
except OSError as e:
    fail(f"127.0.0.1:{port}: {e.strerror or e}")
    sys.exit(125)
server.listen(64)
def relay(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def serve():
    while True:
        client, _ = server.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(path)
        except OSError as e:
            # The proxy is gone (its turn ended): the harness is stopped with one line rather
            # than left to retry.
            client.close()
            fail(f"{path}: {e.strerror or e}")
            child.kill()
            return
        threading.Thread(target=relay, args=(client, upstream), daemon=True).start()
        threading.Thread(target=relay, args=(upstream, client), daemon=True).start()

child = subprocess.Popen(argv, close_fds=False)
threading.Thread(target=serve, daemon=True).start()
sys.exit(child.wait())
"""


def forwarded(argv: list[str], socket_path: str, port: int) -> list[str]:
    """``argv`` started by the forwarder (inside the sandbox's network namespace)."""
    return [sys.executable, "-c", FORWARDER, socket_path, str(port), *argv]
