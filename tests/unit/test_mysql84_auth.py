"""caching_sha2_password, the default authentication of MySQL 8.4 (mysql_native_password is
off by default there and gone in 9.0), as the source's connections log in: the catalog
connection (``catalog.connect``) and the binlog stream's (``catalog.library_connect``).

No MySQL 8 server runs here, so a thread in the test speaks the server's side of the
documented exchange (MySQL client/server protocol: Protocol::HandshakeV10, then
caching_sha2_password): the fast path, where the server has the account's hash cached and
answers the scramble with 0x01 0x03, and the full authentication after a server restart
(0x01 0x04), which without TLS asks for the server's RSA public key (0x02) and reads the
password encrypted with it (RSA-OAEP, the password XOR the nonce).
"""

from __future__ import annotations

import functools
import hashlib
import socket
import struct
import threading

import pymysql
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.mysql import catalog
from airflow_provider_dblog.sources.mysql.catalog import ConnectionSettings

PASSWORD = "s3cret-pw"
NONCE = bytes(range(0x21, 0x21 + 20))  # 20 bytes, no NUL (as the server makes it)
# CLIENT_LONG_PASSWORD, CONNECT_WITH_DB, PROTOCOL_41, TRANSACTIONS, SECURE_CONNECTION,
# MULTI_RESULTS, PLUGIN_AUTH, PLUGIN_AUTH_LENENC_CLIENT_DATA; no SSL: a plaintext connection.
CAPABILITIES = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000 | 0x200000
OK = b"\x00\x00\x00\x02\x00\x00\x00"  # OK packet: 0 rows, id 0, SERVER_STATUS_AUTOCOMMIT, 0 warnings


@functools.cache
def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _greeting() -> bytes:
    """Protocol::HandshakeV10 of a MySQL 8.4 server whose default plugin is caching_sha2_password."""
    return (
        b"\x0a8.4.3\x00"
        + struct.pack("<I", 42)
        + NONCE[:8]
        + b"\x00"
        + struct.pack("<HBHHB", CAPABILITIES & 0xFFFF, 255, 0x0002, CAPABILITIES >> 16, 21)
        + b"\x00" * 10
        + NONCE[8:]
        + b"\x00"
        + b"caching_sha2_password\x00"
    )


class FakeMySQL84:
    """One listening socket; each connection logs in by caching_sha2_password (``full``: the
    cache is empty, as after a restart) and then answers every query with OK."""

    def __init__(self, full: bool):
        self.full = full
        self.key = _key()
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)  # accept() wakes up to see stop
        self.port = self.sock.getsockname()[1]
        self.logins: list[tuple[str, str]] = []  # (user, how)
        self.queries: list[str] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def settings(self, password: str = PASSWORD) -> ConnectionSettings:
        return ConnectionSettings("127.0.0.1", self.port, "dblog", password, connect_timeout=5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            with conn:
                try:
                    self._session(conn)
                except (ConnectionError, EOFError):
                    pass  # the client gave up (the test of a missing package)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    self.errors.append(exc)

    # framing: 3-byte length, sequence number, payload
    def _send(self, conn: socket.socket, seq: int, payload: bytes) -> None:
        conn.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload)

    def _recv(self, conn: socket.socket) -> tuple[int, bytes]:
        head = self._exactly(conn, 4)
        return head[3], self._exactly(conn, int.from_bytes(head[:3], "little"))

    @staticmethod
    def _exactly(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _session(self, conn: socket.socket) -> None:
        self._send(conn, 0, _greeting())
        seq, response = self._recv(conn)
        user_end = response.index(b"\x00", 32)
        user = response[32:user_end].decode()
        n = response[user_end + 1]  # length-encoded; < 251 here
        scramble = response[user_end + 2 : user_end + 2 + n]
        assert response.endswith(b"caching_sha2_password\x00"), response
        p1 = hashlib.sha256(PASSWORD.encode()).digest()
        p3 = hashlib.sha256(hashlib.sha256(p1).digest() + NONCE).digest()
        if scramble != bytes(a ^ b for a, b in zip(p1, p3)):
            self._send(conn, seq + 1, b"\xff" + struct.pack("<H", 1045) + b"#28000Access denied for user")
            return
        if not self.full:
            self._send(conn, seq + 1, b"\x01\x03")  # fast_auth_success
            self._send(conn, seq + 2, OK)
            how = "fast"
        else:
            self._send(conn, seq + 1, b"\x01\x04")  # perform_full_authentication
            seq, ask = self._recv(conn)
            assert ask == b"\x02", ask  # no TLS: the client asks for the RSA public key
            pem = self.key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            self._send(conn, seq + 1, b"\x01" + pem)
            seq, encrypted = self._recv(conn)
            oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
            plain = self.key.decrypt(encrypted, oaep)
            password = bytes(c ^ NONCE[i % len(NONCE)] for i, c in enumerate(plain))
            if password != PASSWORD.encode() + b"\x00":
                self._send(conn, seq + 1, b"\xff" + struct.pack("<H", 1045) + b"#28000Access denied for user")
                return
            self._send(conn, seq + 1, OK)
            how = "full"
        self.logins.append((user, how))
        while True:
            _, command = self._recv(conn)
            if command[:1] == b"\x01":  # COM_QUIT
                return
            assert command[:1] == b"\x03", command  # COM_QUERY
            self.queries.append(command[1:].decode())
            self._send(conn, 1, OK)


@pytest.fixture(params=[False, True], ids=["fast-auth", "full-auth-rsa"])
def server(request):
    s = FakeMySQL84(full=request.param)
    yield s
    s.close()
    assert not s.errors, s.errors


def test_the_catalog_connection_logs_in_by_caching_sha2(server):
    conn = catalog.connect(server.settings())
    conn.close()
    assert server.logins == [("dblog", "full" if server.full else "fast")]
    assert "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED" in server.queries


def test_the_binlog_stream_connection_logs_in_the_same_way(server):
    # as mysql-replication opens its stream and control connections (pymysql_wrapper)
    kwargs = catalog.library_connection_settings(server.settings(), read_timeout=30)
    conn = catalog.library_connect(db="information_schema", autocommit=True, **kwargs)
    conn.close()
    assert server.logins == [("dblog", "full" if server.full else "fast")]


def test_a_wrong_password_is_refused_as_a_login_error():
    s = FakeMySQL84(full=False)
    try:
        with pytest.raises(ConfigurationError, match="refused the login"):
            catalog.connect(s.settings(password="wrong"))
    finally:
        s.close()


def test_full_authentication_without_cryptography_names_the_fix(monkeypatch):
    # PyMySQL encrypts the password with the server's RSA key only with `cryptography`
    monkeypatch.setattr(pymysql._auth, "_have_cryptography", False)
    s = FakeMySQL84(full=True)
    try:
        for connect in (
            lambda: catalog.connect(s.settings()),
            lambda: catalog.library_connect(**catalog.library_connection_settings(s.settings())),
        ):
            with pytest.raises(ConfigurationError) as err:
                connect()
            assert "caching_sha2_password" in err.value.cause and "cryptography" in err.value.cause
            assert "PyMySQL[rsa]" in err.value.fix and "sslmode" in err.value.fix
    finally:
        s.close()
