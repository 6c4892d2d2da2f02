"""What tests that kill real processes ask of /proc."""

from __future__ import annotations


def running(pid: int) -> bool:
    """The process exists and has not exited (an exited orphan may stay a zombie here)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
