"""TLS settings (sources/tls.py): checked config, the drivers' parameters, and which
connection errors TLS explains (the servers' own errors are in integration/test_tls.py)."""

from __future__ import annotations

import ssl

import pytest

from airflow_provider_dblog.config import check_keys
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.tls import TLSSettings, tls_error_fix, tls_settings


def test_the_libpq_names_pass_through_and_the_passphrase_comes_from_the_environment(tmp_path, monkeypatch):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    monkeypatch.setenv("KEY_PW", "s3cret")
    s = tls_settings({"sslmode": "verify-full", "sslrootcert": str(ca), "sslpassword_env": "KEY_PW"})
    assert s.libpq() == {"sslmode": "verify-full", "sslrootcert": str(ca), "sslpassword": "s3cret"}
    assert "s3cret" not in repr(s)  # never printed


def test_the_passphrase_from_a_file(tmp_path):
    f = tmp_path / "pw"
    f.write_text("from-a-file\n")
    assert tls_settings({"sslmode": "require", "sslpassword_file": str(f)}).key_password == "from-a-file"


@pytest.mark.parametrize(
    "src,needle",
    [
        ({"sslmode": "verify-everything"}, "not a TLS mode"),
        ({"sslmode": "verify-full"}, "set sslrootcert"),
        ({"sslmode": "require", "sslpassword": "inline"}, "sslpassword_env"),
        ({"sslmode": "require", "sslcert": "/c.pem"}, "both sslcert and sslkey"),
        ({"sslmode": "verify-ca", "sslrootcert": "/nonexistent/ca.pem"}, "not a readable file"),
        ({"sslmode": "require", "sslpassword_env": "DBLOG_UNSET_FOR_SURE"}, "not set"),
    ],
)
def test_bad_tls_settings_are_refused_naming_the_setting(src, needle):
    with pytest.raises(ConfigurationError) as err:
        tls_settings(src)
    assert needle in str(err.value) and "Fix:" in str(err.value)


def test_the_tls_keys_are_known_to_the_strict_config():
    check_keys("source", {"sslmode": "require", "sslrootcert": "/ca", "sslcert": "c", "sslkey": "k"})
    with pytest.raises(ConfigurationError) as err:
        check_keys("source", {"ssl_mode": "require"})
    assert "sslmode" in str(err.value)


def test_mysql_gets_an_ssl_context_that_verifies_as_the_mode_says():
    assert TLSSettings().pymysql() == {}
    assert TLSSettings("disable").pymysql() == {"ssl_disabled": True}
    ctx = TLSSettings("require").pymysql()["ssl"]
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode is ssl.CERT_NONE and not ctx.check_hostname
    ca = ssl.get_default_verify_paths().cafile
    if ca:
        full = TLSSettings("verify-full", ca).pymysql()["ssl"]
        assert full.verify_mode is ssl.CERT_REQUIRED and full.check_hostname
        only_ca = TLSSettings("verify-ca", ca).pymysql()["ssl"]
        assert only_ca.verify_mode is ssl.CERT_REQUIRED and not only_ca.check_hostname
    with pytest.raises(ConfigurationError):
        TLSSettings("prefer").pymysql()  # PyMySQL has no fallback to plaintext


@pytest.mark.parametrize(
    "message,needle",
    [
        # libpq
        ('server certificate for "127.0.0.1" does not match host name "localhost"', "not issued for the host"),
        ("SSL error: certificate verify failed", "sslrootcert"),
        ('pg_hba.conf rejects connection for host "127.0.0.1", user "u", database "d", no encryption', "sslmode"),
        ("server does not support SSL, but SSL was required", "does not offer TLS"),
        # PyMySQL (Python's ssl module)
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch", "not issued for the host"),
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer", "sslrootcert"),
    ],
)
def test_tls_connection_errors_name_the_setting(message, needle):
    fix = tls_error_fix(message, TLSSettings("verify-full", "/ca"))
    assert fix is not None and needle in fix


def test_other_errors_are_not_taken_for_tls():
    assert tls_error_fix("connection refused", TLSSettings("verify-full", "/ca")) is None
    assert tls_error_fix("(1045, \"Access denied for user 'u'\")", TLSSettings("verify-full", "/ca")) is None
    assert "REQUIRE SSL" in tls_error_fix("(1045, \"Access denied for user 'u'\")", TLSSettings())
