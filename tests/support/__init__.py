"""Test support that production code must not carry: fault injection around the capture
(``faults``, run as ``python -m tests.support.faulty_dblog``) and the landing job
(``python -m tests.support.slow_landing``)."""
