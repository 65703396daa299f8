"""How every JVM of the suite runs, and the archive of Spark's classes they map instead of loading them again.

The JVMs are Spark's drivers (pyspark's ``spark-submit``, in a test process or a worker's), the Connect servers, the
standalone cluster's master and worker (``SPARK_SUBMIT_OPTS``, ``SPARK_DAEMON_JAVA_OPTS``, set in the environment by
tests/conftest.py, which every process the tests start inherits) and its executors (``master_and_conf`` in
tests/spark/sessions.py). A test's JVM lives seconds to minutes on kilobytes of data, and the suite runs on two cores:

- the client compiler alone, and garbage collected on one thread: the optimising compiler's work at start-up is
  most of such a JVM's CPU and is never paid back (the pipeline's end-to-end run in a worker process of its own
  went from 20 s to 14 s);
- class data sharing: a JVM of Spark loads some ten thousand classes at start, and reading, verifying and linking
  them is most of what is left. Java maps classes from an archive made once (``-XX:ArchiveClassesAtExit``, by a
  small job of the kinds the tests run). Measured here on a local session's first jobs under ``spark-submit``:
  8.4 s of CPU, 5.2 s with the archive.

The archive is made by ``make test`` before pytest, into ``.venv`` (it belongs to the installed pyspark and JDK),
named for the JDK, pyspark and the options, so that an upgrade of any of them makes a new one. A JVM whose classpath
or JDK does not match the archive ignores it (``-Xshare:auto``, its messages off), and the option is given only when
the archive exists: without it the tests run as before, only slower.

    python -m tests.spark.jvm        # prints the archive's path, making it first if missing
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The compiler and collector (above); the archive is made and used with these.
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Class data sharing's own messages (an archive that does not match, a class it skipped) stay out of the tests' logs.
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"

#: The job the archive is made from: SQL, a shuffle, Parquet and JSON, and Python on executors (RDD and UDF).
JOB = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
frame = spark.range(1000).withColumn("text", F.concat(F.lit("n"), F.col("id").cast("string")))
frame.groupBy((F.col("id") % 7).alias("k")).agg(F.count("*"), F.max("text")).collect()
frame.write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).filter("id > 10").count()
spark.read.json(spark.sparkContext.parallelize(['{"a": 1}'])).collect()
spark.sparkContext.parallelize(range(100), 2).map(lambda n: n * 2).sum()
spark.createDataFrame([(1, "a")], "n int, s string").select(F.udf(lambda s: s.upper())("s")).collect()
spark.stop()
"""


def spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")  # found, not imported: the fast tier does not pay for pyspark
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return Path(spec.origin).parent


def archive_path() -> Path | None:
    """Where the archive for this JDK, pyspark and options is (made or not); None without a JDK or pyspark."""
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True, timeout=60).stderr
        version = importlib.metadata.version("pyspark")
    except (OSError, subprocess.SubprocessError, importlib.metadata.PackageNotFoundError):
        return None
    key = hashlib.sha256(f"{java}\n{version}\n{BASE_OPTIONS}".encode()).hexdigest()[:12]
    return Path(sys.prefix) / f"spark-classes-{key}.jsa"


@functools.cache
def options() -> str:
    """The suite's JVM options: the archive's too where it has been made."""
    path = archive_path()
    return f"{BASE_OPTIONS} -XX:SharedArchiveFile={path} {QUIET}" if path and path.is_file() else BASE_OPTIONS


def make(path: Path) -> None:
    """Run the job under ``spark-submit``, the archive written at its exit beside ``path``, then put it in place."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with tempfile.TemporaryDirectory(prefix="spark-archive-") as folder:
            script = Path(folder) / "job.py"
            script.write_text(JOB, encoding="utf-8")
            env = os.environ | {
                "PYSPARK_PYTHON": sys.executable,
                "SPARK_SUBMIT_OPTS": f"{BASE_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off",
            }
            done = subprocess.run(
                [str(spark_home() / "bin" / "spark-submit"), str(script), f"{folder}/table"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
        if done.returncode != 0 or not partial.is_file():
            raise SystemExit(f"the Spark class archive was not made (exit {done.returncode}):\n{done.stderr[-3000:]}")
        os.replace(partial, path)  # whole or not at all: a JVM starting meanwhile finds no archive, not half of one
    finally:
        partial.unlink(missing_ok=True)


def main() -> None:
    path = archive_path()
    if path is None:
        raise SystemExit("the Spark class archive needs java on PATH and pyspark installed")
    if not path.is_file():
        make(path)
    print(path)


if __name__ == "__main__":
    main()
