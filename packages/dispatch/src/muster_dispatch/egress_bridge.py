"""The sandbox's side of egress: ``python3 -I -S -c <this file> SOCKET PORT=TAG… -- COMMAND…``.

Run inside the sandbox (the standard library only, no site packages): listen on the sandbox's loopback at each PORT,
then fork; the parent becomes COMMAND (so it keeps the sandbox's first process and its pipes, and nothing of it
connects before the ports listen), the child carries each accepted connection to the host's unix SOCKET, sending its
TAG as a first line (``proxy``, or the ``host:port`` of a loopback endpoint). The child holds none of the command's
pipes, and dies with the sandbox when the command ends.
"""

import contextlib
import os
import socket
import sys
import threading

_CHUNK = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, path: str, tag: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        upstream.sendall(tag.encode() + b"\n")
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept(server: socket.socket, path: str, tag: str) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            continue
        threading.Thread(target=_carry, args=(client, path, tag), daemon=True).start()


def main(args: list[str]) -> None:
    split = args.index("--")
    path, specs, command = args[0], args[1:split], args[split + 1 :]
    servers: list[tuple[socket.socket, str]] = []
    for spec in specs:
        port, _, tag = spec.partition("=")
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", int(port)))
        server.listen(128)
        servers.append((server, tag))
    if os.fork() == 0:
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        threads = [threading.Thread(target=_accept, args=(s, path, t), daemon=True) for s, t in servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        os._exit(0)
    for server, _ in servers:
        server.close()
    os.execvp(command[0], command)  # noqa: S606 (the sandboxed command itself, as given)


if __name__ == "__main__":
    main(sys.argv[1:])
