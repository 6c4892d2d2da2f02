"""The log-retention warning decisions of both sources, with numbers (no servers)."""

from airflow_provider_dblog.sources.mysql.binlog_log import binlog_expiry_warning, expire_seconds
from airflow_provider_dblog.sources.postgres.slot_log import retention_warning

MB = 1 << 20


def test_postgres_warns_on_wal_status_and_on_little_safe_wal_left():
    assert retention_warning("s", "reserved", 900 * MB, 1000 * MB) is None
    assert retention_warning("s", "reserved", None, -1) is None  # unlimited retention
    assert retention_warning("s", "reserved", 250 * MB, 1000 * MB) is None  # 25% left
    w = retention_warning("s", "reserved", 150 * MB, 1000 * MB)  # 15% left
    assert w and "s" in w and "max_slot_wal_keep_size" in w
    for status in ("extended", "unreserved"):
        w = retention_warning("s", status, None, -1)
        assert w and status in w


def test_mariadb_warns_when_the_checkpoints_binlog_nears_expiry():
    day = 86400.0
    now = 10 * day
    # the file being written is never purged, however old the checkpoint
    assert binlog_expiry_warning(7, 7, now - 30 * day, now, day) is None
    assert binlog_expiry_warning(6, 7, now - 0.5 * day, now, day) is None  # half the retention left
    assert binlog_expiry_warning(6, 7, now - 0.79 * day, now, day) is None
    w = binlog_expiry_warning(6, 7, now - 0.85 * day, now, day)  # 15% left
    assert w and "binlog file number 6" in w
    assert binlog_expiry_warning(6, 7, now - 2 * day, now, day)  # already overdue: still warn
    assert binlog_expiry_warning(6, 7, now - 30 * day, now, 0) is None  # binlogs never expire
    # small retentions work the same way (the integration test's case)
    assert binlog_expiry_warning(1, 2, now - 55, now, 60) and not binlog_expiry_warning(1, 2, now - 5, now, 60)


def test_mariadb_expiry_setting_in_seconds_or_days():
    assert expire_seconds({"binlog_expire_logs_seconds": "3600", "expire_logs_days": "1"}) == 3600
    assert expire_seconds({"binlog_expire_logs_seconds": "0", "expire_logs_days": "2.5"}) == 2.5 * 86400
    assert expire_seconds({"expire_logs_days": "0"}) == 0
