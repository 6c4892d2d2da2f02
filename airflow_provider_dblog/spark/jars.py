"""Resolve the Spark jobs' jars through Maven Central once, into a directory every Spark entry
point reads (``resolve_jars`` in session.py): ``dblog spark-jars`` (and, in a checkout,
``scripts/spark-jars``), so an installed package needs no checkout and no run downloads.

The coordinates are the ones a user puts in ``spark.jars.packages`` on a cluster
(docs/landing.md): Delta Lake, Spark's Kafka source (landing from the Kafka output) and
Hadoop's S3A connector (a lake on ``s3://``). Each package's jars land in
``<dir>/<artifact>-<version>/`` with a ``jars.txt`` listing; a later call finds the listing
and returns at once. Jars Spark itself ships (``pyspark/jars``: Scala, Jackson, Hadoop, ...)
are left out, as ``--packages`` would not need them either: a second, older copy only
invites version clashes. The S3A jars are a class path (``:``), not ``--jars``: they go on the
driver's and executors' class path (session.py, ``s3a_conf``), since ``--jars`` would copy the
AWS SDK bundle (650 MB) into every session.

Maven (``mvn dependency:copy-dependencies``) when it is on PATH, else Spark's own resolver
(Ivy, the ``--packages`` mechanism) in a throwaway local session.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from airflow_provider_dblog.spark.kafka_changelog import KAFKA_PACKAGE
from airflow_provider_dblog.spark.session import DEFAULT_JARS_DIR, DELTA_PACKAGE, S3A_PACKAGE


def packages() -> dict[str, str]:
    """The coordinates, each overridable (DBLOG_DELTA_PACKAGE, ...) for a newer patch release."""
    return {
        "delta": os.environ.get("DBLOG_DELTA_PACKAGE") or DELTA_PACKAGE,
        "kafka": os.environ.get("DBLOG_KAFKA_PACKAGE") or KAFKA_PACKAGE,
        "s3a": os.environ.get("DBLOG_S3A_PACKAGE") or S3A_PACKAGE,
    }


def jars_dir(given: Optional[str] = None) -> Path:
    return Path(given or os.environ.get("DBLOG_SPARK_JARS_DIR") or DEFAULT_JARS_DIR)


class JarsError(Exception):
    """A resolution that cannot work here; the message names the fix."""


def _pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError:
        raise JarsError("pyspark is not installed in this Python. Fix: pip install airflow-provider-dblog") from None
    return Path(pyspark.__file__).parent / "jars"


def resolve(package: str, cache: Path, log=sys.stderr) -> list[str]:
    """The jar paths of ``package`` (GROUP:ARTIFACT:VERSION) and its runtime dependencies that
    Spark does not ship, resolved once into ``cache``."""
    group, artifact, version = package.split(":")
    dest = cache / f"{artifact}-{version}"
    listing = dest / "jars.txt"
    if listing.is_file():
        jars = [j for j in listing.read_text().strip().split(",") if j]
        if jars and all(Path(j).is_file() for j in jars):
            return jars
    spark_jars = _pyspark_jars()
    print(f"spark-jars: resolving {package} from Maven Central into {cache} (once)", file=log)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        found = Path(work) / "all"
        found.mkdir()
        ivy = shutil.which("mvn") is None
        if not ivy:
            pom = Path(work) / "pom.xml"
            pom.write_text(
                '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
                "<groupId>local.dblog</groupId><artifactId>spark-jars</artifactId><version>1</version>"
                f"<dependencies><dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                f"<version>{version}</version></dependency></dependencies></project>"
            )
            cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom), f"-Dmaven.repo.local={cache / 'm2'}"]
            cmd += ["dependency:copy-dependencies", f"-DoutputDirectory={found}", "-DincludeScope=runtime"]
            done = subprocess.run(cmd, stdout=log, stderr=log)
            if done.returncode:
                raise JarsError(
                    f"mvn could not resolve {package} (exit {done.returncode}, above). Fix: check access to Maven Central"
                )
        else:
            _ivy_resolve(package, cache / "ivy" / artifact, found, log)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for jar in sorted(found.glob("*.jar")):
            name = jar.stem.split("_", 1)[1] if ivy and "_" in jar.stem else jar.stem  # Ivy: group_artifact-version
            base = name.rsplit("-", 1)[0]  # the artifactId without its version
            if glob.glob(str(spark_jars / f"{glob.escape(base)}-[0-9]*")):
                continue  # Spark ships (a newer) one already
            shutil.move(str(jar), tmp / jar.name)  # a move: the AWS SDK bundle alone is 650 MB
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    jars = [str(j) for j in sorted(dest.glob("*.jar"))]
    listing.write_text(",".join(jars) + "\n")
    return jars


def _ivy_resolve(package: str, ivy_home: Path, into: Path, log) -> None:
    """No Maven: Spark's own resolver fetches from Maven Central into a local Ivy cache."""
    code = (
        "import sys\nfrom pyspark.sql import SparkSession\n"
        "s = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
        ".config('spark.jars.packages', sys.argv[1]).config('spark.jars.ivy', sys.argv[2]).getOrCreate())\n"
        "s.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, package, str(ivy_home)], stdout=log, stderr=log)
    if done.returncode:
        raise JarsError(
            f"Spark's resolver could not fetch {package} (exit {done.returncode}, above). Fix: check Java and access to Maven Central"
        )
    for jar in (ivy_home / "jars").glob("*.jar"):
        shutil.copy2(jar, into / jar.name)


def resolve_s3a(package: str, cache: Path, log=sys.stderr) -> list[str]:
    """hadoop-aws must be the Hadoop version pyspark bundles; checked before resolving."""
    version = package.rsplit(":", 1)[1]
    if not (cache / f"hadoop-aws-{version}" / "jars.txt").is_file():
        bundled = sorted(p.name for p in _pyspark_jars().glob("hadoop-client-api-*.jar"))
        if bundled != [f"hadoop-client-api-{version}.jar"]:
            raise JarsError(
                f"{package} does not match pyspark's Hadoop ({' '.join(bundled)}): set DBLOG_S3A_PACKAGE "
                "(or S3A_PACKAGE in airflow_provider_dblog/spark/session.py) to that version"
            )
    return resolve(package, cache, log)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help=f"where to keep the jars (default $DBLOG_SPARK_JARS_DIR, else {DEFAULT_JARS_DIR})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--package", action="store_true", help="print Delta's Maven coordinate only")
    what.add_argument("--kafka-package", action="store_true", help="print the Kafka source's coordinate only")
    what.add_argument("--s3a-package", action="store_true", help="print the S3A connector's coordinate only")
    what.add_argument("--s3a", action="store_true", help="print the S3A jars as a class path (resolving them once)")
    p.add_argument(
        "--no-s3a",
        action="store_true",
        help="leave the S3A connector out (no 650 MB download where no lake is on S3; also DBLOG_SPARK_S3A=0)",
    )


def main_with(args: argparse.Namespace) -> int:
    """Prints the comma-separated Delta + Kafka jar list (the value for ``--jars``), or what the
    flag asks for; resolves the S3A connector too unless told not to."""
    coords = packages()
    for flag, key in (("package", "delta"), ("kafka_package", "kafka"), ("s3a_package", "s3a")):
        if getattr(args, flag):
            print(coords[key])
            return 0
    cache = jars_dir(args.dir)
    try:
        if args.s3a:
            print(":".join(resolve_s3a(coords["s3a"], cache)))
            return 0
        jars = resolve(coords["delta"], cache) + resolve(coords["kafka"], cache)
        if not args.no_s3a and os.environ.get("DBLOG_SPARK_S3A", "1") != "0":
            resolve_s3a(coords["s3a"], cache)
    except JarsError as e:
        print(f"spark-jars: {e}", file=sys.stderr)
        return 1
    print(",".join(jars))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="dblog spark-jars", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return main_with(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
