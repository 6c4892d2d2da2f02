"""The compiled extension's half of the build; everything else is declared in pyproject.toml.

A wheel carries the compiled decoder (native/, a PyO3 extension built by setuptools-rust,
abi3: one wheel serves CPython 3.10 and later) unless ``DBLOG_PURE_PYTHON=1`` asks for the
pure-Python wheel, which is tagged ``py3-none-any`` so nobody mistakes one for the other, and
says so once when the package decodes its first event (sources/native.py). Without cargo and
without that setting the build stops here, naming both ways out, rather than producing a slow
wheel that looks like a native one. Each kind builds in its own directory under build/, so a
pure build never picks up a native build's leftover ``.so``.
"""

import os
import shutil
import sys

from setuptools import setup

PURE = os.environ.get("DBLOG_PURE_PYTHON", "") == "1"
_COMPILES = {"build", "build_ext", "build_rust", "bdist_wheel", "editable_wheel", "develop", "install"}

if PURE:
    setup(options={"build": {"build_base": "build/pure"}})
else:
    cargo = os.environ.get("CARGO", "cargo")
    if _COMPILES.intersection(sys.argv[1:]) and shutil.which(cargo) is None:
        sys.exit(
            f"airflow-provider-dblog: {cargo!r} is not on PATH, and the wheel carries a compiled decoder "
            "(native/, Rust). Fix: install a Rust toolchain (https://rustup.rs, or your system's cargo "
            "package) and build again; or set DBLOG_PURE_PYTHON=1 to build the pure-Python wheel "
            "(py3-none-any), which decodes MySQL/MariaDB and PostgreSQL rows several times slower."
        )
    from setuptools_rust import Binding, RustExtension

    setup(
        rust_extensions=[
            # debug=False: an editable install (`pip install -e .`) is an in-place build, which
            # setuptools-rust makes in debug mode unless told otherwise (~5x slower decoding).
            RustExtension("airflow_provider_dblog._rows_native", "native/Cargo.toml", binding=Binding.PyO3, debug=False)
        ],
        options={"build": {"build_base": "build/native"}, "bdist_wheel": {"py_limited_api": "cp310"}},
    )
