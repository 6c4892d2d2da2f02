"""Benchmarks of the capture and the dumps against real servers (``make bench``).

Not tests: nothing here asserts on time. Every figure is reported next to a raw baseline
measured in the same run on the same machine (pg_recvlogical, mariadb-binlog, COPY, a plain
SELECT), because absolute numbers on a shared, noisy box mean little. See docs/benchmarks.md.
"""
