"""TLS to the source database: one set of settings for PostgreSQL and MySQL/MariaDB.

The names are libpq's (``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``), which most
users know; for MySQL/MariaDB they become an ``ssl.SSLContext`` handed to PyMySQL (and
through it to mysql-replication's binlog connection), so every connection the engine
opens - catalog, chunk SELECTs, watermark writes, the replication stream - uses the same
settings. The client key's passphrase comes from the environment or a file only, never
the config file, the URL or argv (invariant 8).

Modes: ``disable`` (plaintext), ``allow``/``prefer`` (PostgreSQL only: libpq's fallbacks),
``require`` (encrypted, server not verified), ``verify-ca`` (server certificate signed by
``sslrootcert``) and ``verify-full`` (and issued for the host connected to).
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from typing import Any, Optional

from ..core.errors import ConfigurationError

MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_VERIFY = ("verify-ca", "verify-full")
# Config keys (flat in [source]); ``sslpassword`` itself is refused with its own fix.
TLS_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword_env", "sslpassword_file", "sslpassword")


@dataclasses.dataclass(frozen=True)
class TLSSettings:
    mode: Optional[str] = None  # None: the driver's default (libpq: prefer; PyMySQL: plaintext)
    rootcert: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    key_password: Optional[str] = dataclasses.field(default=None, repr=False)  # never printed

    @property
    def encrypted(self) -> bool:
        return self.mode not in (None, "disable", "allow", "prefer")

    def libpq(self) -> dict[str, Any]:
        """Connection parameters for psycopg2 (libpq names)."""
        params: dict[str, Any] = {}
        for name, value in (
            ("sslmode", self.mode),
            ("sslrootcert", self.rootcert),
            ("sslcert", self.cert),
            ("sslkey", self.key),
            ("sslpassword", self.key_password),
        ):
            if value is not None:
                params[name] = value
        return params

    def pymysql(self) -> dict[str, Any]:
        """Connection parameters for PyMySQL: an SSLContext, or TLS switched off."""
        if self.mode in (None, "disable"):
            return {"ssl_disabled": True} if self.mode == "disable" else {}
        if self.mode in ("allow", "prefer"):
            raise ConfigurationError(
                f"sslmode = {self.mode!r} is not available for MySQL/MariaDB (PyMySQL cannot fall back).",
                "use sslmode = 'disable', 'require', 'verify-ca' or 'verify-full'.",
            )
        ctx = ssl.create_default_context(cafile=self.rootcert)
        ctx.check_hostname = self.mode == "verify-full"
        ctx.verify_mode = ssl.CERT_REQUIRED if self.mode in _VERIFY else ssl.CERT_NONE
        if self.cert:
            try:
                ctx.load_cert_chain(self.cert, self.key, self.key_password)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigurationError(
                    f"cannot load the client certificate {self.cert} / key {self.key}: {exc}.",
                    "check sslcert and sslkey, and that sslpassword_env / sslpassword_file holds the "
                    "key's passphrase if it is encrypted.",
                ) from None
        return {"ssl": ctx}


def tls_settings(src: dict[str, Any]) -> TLSSettings:
    """The TLS settings of a ``[source]`` table, checked: a known mode, readable files, a CA
    for the verifying modes, a passphrase only from the environment or a file."""
    mode = src.get("sslmode")
    if mode is not None and mode not in MODES:
        raise ConfigurationError(f"sslmode = {mode!r} is not a TLS mode.", f"use one of {', '.join(MODES)}.")
    if "sslpassword" in src:
        raise ConfigurationError(
            "the client key's passphrase was given in the configuration (sslpassword).",
            "put it in an environment variable named by sslpassword_env, or in a file named by sslpassword_file.",
        )
    if mode in _VERIFY and not src.get("sslrootcert"):
        raise ConfigurationError(
            f"sslmode = {mode!r} verifies the server's certificate, but no CA is given.",
            "set sslrootcert to the file of the CA certificate(s) that signed the server's certificate.",
        )
    if bool(src.get("sslcert")) != bool(src.get("sslkey")):
        raise ConfigurationError("a client certificate needs both sslcert and sslkey.", "set both, or neither.")
    for name in ("sslrootcert", "sslcert", "sslkey", "sslpassword_file"):
        path = src.get(name)
        if path and not os.access(path, os.R_OK):
            raise ConfigurationError(f"{name} = {path!r} is not a readable file.", f"point {name} at an existing file.")
    password = None
    if src.get("sslpassword_file"):
        with open(src["sslpassword_file"], encoding="utf-8") as f:
            password = f.read().rstrip("\n")
    elif src.get("sslpassword_env"):
        password = os.environ.get(src["sslpassword_env"])
        if password is None:
            raise ConfigurationError(
                f"sslpassword_env names the variable {src['sslpassword_env']}, which is not set.",
                "set it to the client key's passphrase in the capture's environment.",
            )
    return TLSSettings(mode, src.get("sslrootcert"), src.get("sslcert"), src.get("sslkey"), password)


def tls_error_fix(message: str, settings: TLSSettings) -> Optional[str]:
    """The setting to change for a connection error that TLS explains, else None (the
    message is the driver's; PostgreSQL and MySQL/MariaDB phrase these differently)."""
    text = message.lower()
    if "private key file" in text or "could not load private key" in text or "could not load certificate" in text:
        return "check sslcert / sslkey: readable by the capture only (mode 0600), and the key's passphrase in sslpassword_env or sslpassword_file."
    if "certificate verify failed" in text and ("mismatch" in text or "hostname" in text or "ip address" in text):
        return (
            "the server's certificate was not issued for the host connected to: connect by a name "
            "(or address) the certificate lists, or use sslmode = 'verify-ca' to check the CA only."
        )
    if "does not match host name" in text:
        return (
            "the server's certificate was not issued for the host connected to: set host to a name "
            "the certificate lists, or use sslmode = 'verify-ca' to check the CA only."
        )
    if "certificate verify failed" in text or "unable to get local issuer" in text or "self-signed" in text:
        return "set sslrootcert to the CA that signed the server's certificate (the one given does not verify it)."
    if ("ssl" in text or "tls" in text) and "not support" in text:
        return "the server does not offer TLS: enable it on the server, or set sslmode = 'disable'."
    if "no encryption" in text or "insecure transport" in text or ("ssl" in text and "required" in text):
        return "the server accepts only TLS connections: set sslmode = 'verify-full' (with sslrootcert) or 'require'."
    if not settings.encrypted and "access denied" in text:
        return (
            "check the user name and password; if the account requires TLS (REQUIRE SSL / X509), set "
            "sslmode (and sslcert/sslkey for X509)."
        )
    return None
