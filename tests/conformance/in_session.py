"""``ackstate`` commands run by this test process's Spark session, for a program that calls
the ``ackstate`` command line as a subprocess (the shared conformance runner).

``command_server`` listens on a Unix socket in the test process and runs each request with
``jobs.cli.main``, in the session the tests share; ``python in_session.py SOCKET ARGS...`` is
the command the program is given: it sends its arguments, prints what the command printed and
exits with its status.

Why: each command as a process of its own starts a Spark JVM (8-10 s before its first query on
two cores); the conformance runner starts four per scenario group. What the runner judges is
the commands' output for the scenarios' events, which does not depend on the process that
computes it. The commands' own processes are tested where that is the point: ``stats`` and
``internal-stats`` in ``tests/jobs/read/test_stats.py``, ``ingest`` in ``tests/s3``, the
killed-ingest tests and ``tests/cluster``.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import socketserver
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).resolve()


def _read_message(stream: Any) -> dict[str, Any]:
    line = stream.readline()
    if not line:
        raise ConnectionError("the other side closed the socket before a message")
    return json.loads(line)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        from jobs.cli import main

        request = _read_message(self.rfile)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(request["argv"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # reported to the client, not lost in this thread
                print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
        reply = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


@contextlib.contextmanager
def command_server() -> Iterator[list[str]]:
    """Serve commands while the block runs, one at a time (each redirects this process's
    standard output); yields the command line that runs ``ackstate`` through the server.

    The socket lives in a directory of its own under the system's temporary directory: a Unix
    socket's path has room for about 100 bytes, which pytest's base directories can exceed."""
    with tempfile.TemporaryDirectory(prefix="ackstate-") as directory:
        path = Path(directory) / "cli.sock"
        server = socketserver.UnixStreamServer(str(path), _Handler)
        thread = threading.Thread(target=server.serve_forever, name="ackstate-in-session", daemon=True)
        thread.start()
        try:
            yield [sys.executable, str(CLIENT), str(path)]
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def _client(path: str, argv: list[str]) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        stream = sock.makefile("rwb")
        stream.write(json.dumps({"argv": argv}).encode() + b"\n")
        stream.flush()
        reply = _read_message(stream)
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    return int(reply["code"])


if __name__ == "__main__":
    sys.exit(_client(sys.argv[1], sys.argv[2:]))
