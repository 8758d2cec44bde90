"""The admin API client of ``ackstate bootstrap``: TLS with a private CA, tokens, clear errors.

A real HTTPS server on 127.0.0.1 (``http.server`` with a certificate ``openssl`` makes for the
test) stands in for a broker's admin API: the CA file is what makes it trusted, and without it
the call fails in one sentence. No JVM.
"""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.ingest.bootstrap import TOKEN_ENV, AdminApi, read_token
from jobs.platform.errors import BootstrapError

TOKEN = "secret-token-value"


class _Admin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps(["public", "pulsar"]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def https_admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URL, CA file) of an HTTPS server whose self-signed certificate names 127.0.0.1."""
    work = tmp_path_factory.mktemp("tls")
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Admin)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def test_a_private_ca_is_trusted_through_the_ca_file(https_admin: tuple[str, Path]) -> None:
    url, ca = https_admin
    assert AdminApi(url, TOKEN, str(ca)).get("/admin/v2/tenants") == ["public", "pulsar"]


def test_without_the_ca_file_the_certificate_is_refused_in_one_sentence(
    https_admin: tuple[str, Path],
) -> None:
    url, _ = https_admin
    with pytest.raises(
        BootstrapError, match=r"cannot reach the admin API at https://.*CERTIFICATE_VERIFY_FAILED"
    ):
        AdminApi(url, TOKEN).get("/admin/v2/tenants")


def test_a_wrong_token_is_named_without_showing_it(https_admin: tuple[str, Path]) -> None:
    url, ca = https_admin
    with pytest.raises(
        BootstrapError, match=r"refused the request \(HTTP 401\) with the token given"
    ) as info:
        AdminApi(url, "not-the-token", str(ca)).get("/admin/v2/tenants")
    assert "not-the-token" not in str(info.value)
    assert "not-the-token" not in repr(AdminApi(url, "not-the-token"))


def test_the_token_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert read_token(None) is None
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert read_token(None) == "from-env"
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert read_token(str(path)) == TOKEN  # the file wins, trailing newline dropped
    (tmp_path / "empty").write_text("")
    with pytest.raises(BootstrapError, match="is empty"):
        read_token(str(tmp_path / "empty"))
    with pytest.raises(BootstrapError, match="cannot read the token file"):
        read_token(str(tmp_path / "missing"))


def test_the_token_is_never_an_argument() -> None:
    from jobs import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bootstrap", "--admin-url", "http://x", "--token", TOKEN])
