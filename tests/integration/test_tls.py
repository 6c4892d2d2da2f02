"""TLS to both sources (issue 10, part 1), against the servers scripts/services starts: TLS
on, a user (dblog_tls) that only TLS with a client certificate may use, a server certificate
for 127.0.0.1 signed by a throw-away CA.

Capture and a dump run with full verification over every connection the engine opens
(catalog, chunk SELECTs, watermark writes, the replication stream: the server's own view of
the sessions says they are encrypted); a plaintext attempt, a wrong CA and a host-name
mismatch each stop with an error naming the setting to fix.
"""

from __future__ import annotations

import random

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.verify import replay

from .databases import env
from .test_engine import Running, db, source_rows, wait  # noqa: F401 - db: the fixture

pytestmark = pytest.mark.integration


def encrypted_sessions(adapter, user: str) -> tuple[int, int]:
    """(encrypted, all) PostgreSQL sessions of ``user``, the walsender included. (On MariaDB
    the account's REQUIRE X509 is the proof: no plaintext session of it can exist.)"""
    with adapter.superconnect() as c:
        cur = c.cursor()
        cur.execute(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a "
            "JOIN pg_stat_ssl s ON s.pid = a.pid WHERE a.usename = %s",
            (user,),
        )
        return tuple(cur.fetchone())


def test_capture_and_dump_over_verified_tls(db, tmp_path):  # noqa: F811
    db.seed(random.Random(3), 40)
    r = Running(db, tmp_path, db.source_id, db.tls_source_config(db.source_id)).start()
    try:
        d = r.dump(None, chunk_size=7)
        wait(lambda: r.status(d).status is DumpStatus.DONE, 60, "the dump over TLS", r)
        with db.connect() as c:
            c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (777, 'over tls')")
            c.commit()
        wait(lambda: any(e.key == (777,) for e in r.events(f"{db.ns}.accounts")), 30, "a logged change", r)
        if db.kind == "postgres":
            encrypted, total = encrypted_sessions(db, env("DBLOG_TLS_USER"))
            assert total >= 2 and encrypted == total  # the catalog/chunk session and walsender
    finally:
        r.stop()
    for t in db.tables():
        assert replay(r.events(t)) == source_rows(db, db.source_id, t), t


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"sslmode": "disable"}, "sslmode"),  # plaintext against a TLS-only account
        ({"sslrootcert": "DBLOG_TLS_OTHER_CA"}, "sslrootcert"),  # a CA that did not sign it
        ({"host": "localhost"}, "not issued for the host"),  # the certificate names 127.0.0.1
    ],
    ids=["plaintext", "wrong-ca", "host-mismatch"],
)
def test_tls_misconfigurations_stop_with_the_setting_to_fix(db, overrides, needle):  # noqa: F811
    cfg = db.tls_source_config(db.source_id)
    cfg.update({k: env(v) if v.startswith("DBLOG_") else v for k, v in overrides.items()})
    source = make_source(cfg)
    with pytest.raises(ConfigurationError) as err:
        source.open()
    assert needle in str(err.value), str(err.value)
