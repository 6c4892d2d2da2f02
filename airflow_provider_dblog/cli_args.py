"""The ``dblog`` command's argument parsing: numeric options checked for their range, and
no credential in argv ever repeated (DESIGN invariant 8: argv is visible to every user of
the machine, and argparse's errors land in Airflow's task logs)."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable, NoReturn

from .core.dumps import MAX_CHUNK_SIZE
from .core.errors import DBLogError, without_userinfo


# -- numeric options: each checked for its range by argparse (exit code 2, usage shown) ---
def number(parse: Callable[[str], Any], lo: float, hi: float = math.inf, what: str = "") -> Callable[[str], Any]:
    """An argparse type: ``parse(text)`` within [lo, hi], finite; else a usage error saying
    what the option takes. Nothing is rounded: "1.5" is not an integer."""
    kind = "an integer" if parse is int else "a number"
    bounds = f"from {lo:,} to {hi:,}" if math.isfinite(hi) else f">= {lo:,}"
    expected = f"{kind} {bounds}{what}"

    def check(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {expected}, not {text!r}")
        return value

    return check


SECONDS = number(float, 0.001, what=" (seconds)")
SECONDS_OR_OFF = number(float, 0, what=" (seconds; 0: off)")
CHUNK_SIZE = number(int, 1, MAX_CHUNK_SIZE, " (rows)")
DELAY_MS = number(int, 0, what=" (milliseconds)")
MEBIBYTES = number(float, 1, what=" (MiB)")


# -- credentials in argv: refused before parsing, never repeated -------------------------
# An option that is not ours and names a credential (``-p``, ``--password``, ``--passwd``,
# ``--sslpassword``, ``--token`` ...): argparse would echo it and its value in its error.
_CREDENTIAL_OPTION = re.compile(r"^(-p(?!-)|--?[\w-]*?(?:pass(?:word|wd)?|pwd|secret|token))", re.IGNORECASE)


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (``--password=X`` would be an "ambiguous option"
    echoed whole, and a prefix silently taken for another option) and whose errors never
    repeat an unrecognised argument's value or a URL's credentials."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # Option names only: a value may be a password typed after a mistyped option.
            names = [e.split("=", 1)[0] for e in extras if e.startswith("-")]
            shown = ", ".join(names) if names else "positional values"
            self.error(f"unrecognized arguments: {shown} (values are not shown: they may be secrets)")
        return parsed

    def error(self, message: str) -> NoReturn:
        super().error(" ".join(without_userinfo(word) for word in message.split(" ")))


def refuse_credentials(argv: list[str], known: set[str]) -> None:
    """DBLogError if argv holds a password option that is not ours (named, not its value)."""
    for token in argv:
        name = token.split("=", 1)[0]
        if token == "--":
            return
        if name in known or not token.startswith("-"):
            continue
        found = _CREDENTIAL_OPTION.match(name)
        if found:
            raise DBLogError(
                f"a credential was given on the command line ({found.group(1)} ...; the value is not shown): "
                "argv is visible to every user of the machine and lands in Airflow's task logs.",
                "put the source password into an environment variable named by --password-env (default "
                "DBLOG_SOURCE_PASSWORD) or a file named by --password-file; ZooKeeper's and the TLS key's "
                "passwords go into [state] auth_password_env / [source] sslpassword_env of the config file.",
            )


def option_names(parser: argparse.ArgumentParser) -> set[str]:
    names = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= option_names(sub)
    return names
