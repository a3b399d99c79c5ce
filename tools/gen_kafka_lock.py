"""Write ``akresil/testing/kafka-jars-<version>.txt``: every jar Apache Kafka ``version`` needs, as Maven resolves
it, with its repository path and SHA-256.  With that list shipped, ``kafka_jars`` fetches the jars straight from
Maven Central (no Maven on the user's machine) and checks each one.

    python tools/gen_kafka_lock.py [VERSION]      # default: kafka_jars.DEFAULT_KAFKA_VERSION; needs mvn

Run it when ``DEFAULT_KAFKA_VERSION`` (or the log4j binding in ``_artifacts``) changes; ``--check`` exits 1 when the
shipped list differs from what Maven resolves now.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from akresil.testing import kafka_jars


def resolve(version: str) -> list[tuple[str, str]]:
    """(repository path, sha256) of every runtime jar of Kafka ``version``'s POM, sorted by path."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("gen_kafka_lock: needs Maven (mvn) on PATH")
    with tempfile.TemporaryDirectory(prefix="akresil-kafka-lock-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(kafka_jars.kafka_pom(version))
        listing = Path(tmp) / "deps.txt"
        subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:list", f"-DoutputFile={listing}",
                        "-DoutputAbsoluteArtifactFilename=true", "-DincludeScope=runtime"], check=True)
        out = []
        for line in listing.read_text().splitlines():
            line = line.strip().split(" -- ")[0]          # newer plugins append " -- module name"
            coords, sep, path = line.partition(":/")
            if not sep or not path.endswith(".jar"):
                continue
            parts = coords.split(":")                     # group:artifact:type[:classifier]:version:scope
            group, artifact, version_ = parts[0], parts[1], parts[-2]
            classifier = f"-{parts[3]}" if len(parts) == 6 else ""
            repo_path = f"{group.replace('.', '/')}/{artifact}/{version_}/{artifact}-{version_}{classifier}.jar"
            local = Path("/" + path)
            if not str(local).endswith(repo_path):
                raise SystemExit(f"gen_kafka_lock: {local} is not at the repository path {repo_path}")
            out.append((repo_path, hashlib.sha256(local.read_bytes()).hexdigest()))
    return sorted(out)


def render(version: str, jars: list[tuple[str, str]]) -> str:
    artifacts = ", ".join(":".join(a) for a in kafka_jars._artifacts(version))
    head = (f"# Apache Kafka {version} for akresil.testing: every runtime jar of {artifacts}\n"
            f"# (repository path, SHA-256), as Maven resolved them; made by tools/gen_kafka_lock.py {version}\n")
    return head + "".join(f"{path} {digest}\n" for path, digest in jars)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", default=kafka_jars.DEFAULT_KAFKA_VERSION)
    parser.add_argument("--check", action="store_true", help="compare with the shipped list instead of writing it")
    args = parser.parse_args()
    target = kafka_jars._lock_file(args.version)
    text = render(args.version, resolve(args.version))
    if args.check:
        same = target.exists() and target.read_text() == text
        print(f"{target.name}: {'up to date' if same else 'differs from what Maven resolves'}")
        return 0 if same else 1
    target.write_text(text)
    print(f"wrote {target} ({text.count(chr(10)) - 2} jars)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
