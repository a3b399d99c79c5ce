"""Apache Kafka's broker as Maven artifacts: resolve them once into a cache folder, and say clearly what is missing.

No Kafka distribution is downloaded: the broker (``org.apache.kafka:kafka_2.13``), its tools and the Java client are
ordinary Maven Central artifacts.  For the default release akresil ships the resolved list (``kafka-jars-<version>.txt``:
each jar's repository path and SHA-256, made by ``tools/gen_kafka_lock.py``), so the jars are fetched straight from
Maven Central (or ``AKRESIL_MAVEN_REPO``) and checked, with nothing but Python and Java on the machine: that is what
lets ``EmbeddedBroker()`` run Apache Kafka wherever Java 17+ is.  Other releases, and extra artifacts, are resolved by
``mvn dependency:copy-dependencies`` on a generated POM.  Either way the jars land in ``<cache>/<version>/libs``; a
marker file written last makes a half-finished resolution visible as such, and a file lock lets parallel test
processes share one cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .broker import BrokerStartError

__all__ = ["DEFAULT_KAFKA_VERSION", "DEFAULT_SPARK_KAFKA_VERSION", "KafkaUnavailable", "LockedJar", "MAVEN_CENTRAL",
           "java_command", "jar_lock", "kafka_cache_dir", "kafka_jars_cached", "kafka_jars_fetchable",
           "kafka_version", "resolve_kafka_jars", "resolve_spark_kafka_jars"]

log = logging.getLogger(__name__)

#: where locked jars are fetched from; ``AKRESIL_MAVEN_REPO`` names a mirror (https://, or file:// for a local one)
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

#: the newest 4.x release this harness is tested with; ``AKRESIL_KAFKA_VERSION`` overrides it (e.g. 3.9.1)
DEFAULT_KAFKA_VERSION = "4.4.0"

#: Spark's own Kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``) for the benchmarks: the newest
#: release on Maven Central here (4.3.0, the installed PySpark's, is not served: Maven reports it missing)
DEFAULT_SPARK_KAFKA_VERSION = "4.2.0"

#: binds the broker's slf4j 1.7 logging to log4j2, so its WARN/ERROR lines reach the node's log file
_LOG4J_BINDING = ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.5")

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>akresil.testing</groupId><artifactId>kafka-runtime</artifactId><version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


class KafkaUnavailable(BrokerStartError):
    """Apache Kafka cannot be started here: the message names what is missing and how to install it."""


def kafka_version(version: str | None = None) -> str:
    chosen = version or os.environ.get("AKRESIL_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION
    if not re.fullmatch(r"\d+\.\d+\.\d+", chosen):
        raise ValueError(f"Kafka version must look like 4.4.0, got {chosen!r}")
    return chosen


def kafka_cache_dir() -> Path:
    """``AKRESIL_KAFKA_CACHE``, else ``$XDG_CACHE_HOME/akresil/kafka`` (``~/.cache/akresil/kafka``)."""
    if os.environ.get("AKRESIL_KAFKA_CACHE"):
        return Path(os.environ["AKRESIL_KAFKA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "akresil" / "kafka"


def java_command() -> str:
    """The ``java`` to run the broker with (``JAVA_HOME`` first, then PATH); it must be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home and os.path.exists(os.path.join(home, "bin", "java")) \
        else shutil.which("java")
    if java is None:
        raise KafkaUnavailable("Apache Kafka needs a Java 17+ runtime and none was found (JAVA_HOME / PATH): "
                               "install one, e.g. `apt-get install -y openjdk-17-jdk-headless`")
    done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):   # "1.8.0_x" style
        major = int(match.group(2))
    if major < 17:
        raise KafkaUnavailable(f"Apache Kafka 4 needs Java 17 or newer; {java} is Java {major or 'unknown'}: "
                               "install one, e.g. `apt-get install -y openjdk-17-jdk-headless`, or set JAVA_HOME")
    return java


@dataclass(frozen=True)
class LockedJar:
    """One jar of a shipped resolution: its path in a Maven repository and the SHA-256 it must have."""

    path: str
    sha256: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _lock_file(version: str) -> Path:
    return Path(__file__).with_name(f"kafka-jars-{version}.txt")


def jar_lock(version: str | None = None) -> list[LockedJar] | None:
    """The jars akresil ships the resolution of for ``version`` (the default release), or None."""
    path = _lock_file(kafka_version(version))
    if not path.exists():
        return None
    jars = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            repo_path, sha256 = line.split()
            jars.append(LockedJar(repo_path, sha256))
    return jars


def maven_repo() -> str:
    return (os.environ.get("AKRESIL_MAVEN_REPO") or MAVEN_CENTRAL).rstrip("/")


def _kafka_key(version: str) -> str:
    """What ``resolved.txt`` holds once Kafka ``version``'s jars are complete (the same for both ways to get them)."""
    return "\n".join(":".join(a) for a in _artifacts(version))


def kafka_jars_cached(version: str | None = None, *, cache_dir: Path | None = None) -> bool:
    """True when Kafka ``version``'s jars are in the cache already (no download, no Maven needed)."""
    version = kafka_version(version)
    marker = (cache_dir or kafka_cache_dir()) / version / "resolved.txt"
    return marker.exists() and marker.read_text() == _kafka_key(version)


def kafka_jars_fetchable(version: str | None = None, *, cache_dir: Path | None = None) -> str | None:
    """None when Kafka ``version``'s jars are cached or can be fetched here (a shipped list, or Maven on PATH);
    otherwise why not, with the fix."""
    version = kafka_version(version)
    if kafka_jars_cached(version, cache_dir=cache_dir) or jar_lock(version) is not None or shutil.which("mvn"):
        return None
    return (f"Apache Kafka {version}'s jars are not cached and akresil ships no jar list for that release, so "
            f"fetching them needs Maven (mvn) on PATH: install it (`apt-get install -y maven`) or use "
            f"{DEFAULT_KAFKA_VERSION}, whose jars akresil fetches itself")


def _artifacts(version: str) -> list[tuple[str, str, str]]:
    return [("org.apache.kafka", "kafka_2.13", version),       # the broker and controller (kafka.Kafka)
            ("org.apache.kafka", "kafka-tools", version),      # reassignment / leader election / configs tools
            ("org.apache.kafka", "kafka-clients", version),    # the Java client, the reference peer
            _LOG4J_BINDING]


def resolve_kafka_jars(version: str | None = None, *, cache_dir: Path | None = None,
                       extra_artifacts: tuple[tuple[str, str, str], ...] = ()) -> Path:
    """The folder holding every jar of Apache Kafka ``version`` (resolved with Maven on first use, then cached).

    ``extra_artifacts`` (group, artifact, version) are resolved into the same folder, e.g. a connector; a cache
    that lacks one of them is completed.  Raises ``KafkaUnavailable`` naming Maven if it is needed and missing.
    """
    version = kafka_version(version)
    root = (cache_dir or kafka_cache_dir()) / version
    wanted = _artifacts(version) + list(extra_artifacts)
    _resolve(root, "\n".join(":".join(a) for a in wanted), kafka_pom(version, extra_artifacts),
             f"Apache Kafka {version}'s jars", put_them=f"every jar of org.apache.kafka:kafka_2.13:{version} "
             "with its dependencies", locked=None if extra_artifacts else jar_lock(version))
    return root / "libs"


def kafka_pom(version: str, extra_artifacts: tuple[tuple[str, str, str], ...] = ()) -> str:
    """The POM whose dependencies are Kafka ``version``'s broker, tools and client (and ``extra_artifacts``)."""
    deps = "\n".join(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                     f"<version>{v}</version></dependency>" for g, a, v in _artifacts(version) + list(extra_artifacts))
    return _POM.format(version=version, deps=deps)


def resolve_spark_kafka_jars(version: str = DEFAULT_SPARK_KAFKA_VERSION, *, cache_dir: Path | None = None,
                             provided: Path | None = None) -> list[Path]:
    """Spark's Kafka connector and what it needs beyond a PySpark install, for ``spark.jars``.

    Resolved with Maven once into ``<cache>/spark-sql-kafka/<version>/libs`` (a sibling of the brokers' folders:
    the connector's kafka-clients is not the broker's), without spark-sql and spark-core.  Returned: the jars
    whose artifact is not already in ``provided`` (default: the installed PySpark's ``jars`` folder), i.e.
    spark-sql-kafka, spark-token-provider-kafka, kafka-clients and commons-pool2; Hadoop, Scala, compression
    and logging jars come from PySpark.
    """
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"Spark version must look like 4.2.0, got {version!r}")
    root = (cache_dir or kafka_cache_dir()) / "spark-sql-kafka" / version
    libs = root / "libs"
    key = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version} -spark-sql -spark-core"
    pom = _POM.format(version=version, deps=(
        "    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>"
        f"<version>{version}</version>\n      <exclusions>"
        "<exclusion><groupId>org.apache.spark</groupId><artifactId>spark-sql_2.13</artifactId></exclusion>"
        "<exclusion><groupId>org.apache.spark</groupId><artifactId>spark-core_2.13</artifactId></exclusion>"
        "</exclusions></dependency>"))
    _resolve(root, key, pom, f"Spark's Kafka connector {version}")
    if provided is None:
        import pyspark
        provided = Path(pyspark.__file__).parent / "jars"
    have = {_artifact_name(j.name) for j in provided.glob("*.jar")}
    return sorted(j for j in libs.glob("*.jar") if _artifact_name(j.name) not in have)


def _artifact_name(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the name without its version)."""
    return re.sub(r"-\d[\w.]*(-[A-Za-z][\w.]*)?\.jar$", "", jar)


def _resolve(root: Path, key: str, pom: str, what: str, *, put_them: str | None = None,
             locked: list[LockedJar] | None = None) -> None:
    """Fill ``root/libs`` unless ``root/resolved.txt`` says ``key`` is there: from the ``locked`` list when there
    is one (straight downloads, checked by SHA-256), else (or when those fail and Maven is here) with ``mvn
    dependency:copy-dependencies`` of ``pom``.  A file lock lets processes share the folder.  ``put_them`` says
    which jars a machine without Maven could place there by hand."""
    libs = root / "libs"
    marker = root / "resolved.txt"
    if marker.exists() and marker.read_text() == key:
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and marker.read_text() == key:
            return
        staging = root / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        mvn = shutil.which("mvn")
        fetched = False
        if locked is not None:
            try:
                _download(locked, staging, what)
                fetched = True
            except KafkaUnavailable as exc:
                if mvn is None:
                    raise
                log.warning("%s; trying Maven instead", exc)
                shutil.rmtree(staging, ignore_errors=True)
        if not fetched:
            if mvn is None:
                by_hand = f", or put the jars in {libs} ({put_them})" if put_them else ""
                raise KafkaUnavailable(f"resolving {what} needs Maven (mvn) on PATH: install it, e.g. "
                                       f"`apt-get install -y maven`{by_hand}")
            (root / "pom.xml").write_text(pom)
            done = subprocess.run([mvn, "-q", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
                                   f"-DoutputDirectory={staging}"], capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                raise KafkaUnavailable(f"Maven could not resolve {what} (mvn exit {done.returncode}):\n"
                                       f"{(done.stdout + done.stderr)[-3000:]}")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(key)


def _download(jars: list[LockedJar], into: Path, what: str) -> None:
    """Fetch every locked jar from the Maven repository into ``into`` (eight at a time), each checked against its
    SHA-256; ``KafkaUnavailable`` names the first that failed and the ways around it."""
    repo = maven_repo()
    into.mkdir(parents=True)
    log.info("fetching %s (%d jars) from %s into %s", what, len(jars), repo, into.parent)

    def fetch(jar: LockedJar) -> None:
        url = f"{repo}/{jar.path}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as exc:      # URLError, HTTPError, timeouts and resets are all OSErrors
            raise KafkaUnavailable(
                f"could not download {what} from {repo}: {url}: {exc}. Check the network (a proxy goes in "
                f"HTTPS_PROXY), point AKRESIL_MAVEN_REPO at a Maven mirror, or install Maven "
                f"(`apt-get install -y maven`), which akresil then uses with its own settings") from exc
        digest = hashlib.sha256(data).hexdigest()
        if digest != jar.sha256:
            raise KafkaUnavailable(f"{url} is not the jar akresil expects (SHA-256 {digest}, expected "
                                   f"{jar.sha256}): a broken mirror or proxy? Unset AKRESIL_MAVEN_REPO or fix it")
        (into / jar.name).write_bytes(data)

    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(fetch, jars):     # the first failure is raised here
            pass


def main(argv: list[str] | None = None) -> int:
    """``python -m akresil.testing.kafka_jars [VERSION]``: resolve the jars now (CI set-up) and print where."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    try:
        java_command()
        print(resolve_kafka_jars(args[0] if args else None))
    except KafkaUnavailable as exc:
        print(f"akresil: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
