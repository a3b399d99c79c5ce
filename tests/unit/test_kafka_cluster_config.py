"""KafkaCluster's configuration and its errors for a machine without Java or Maven (no JVM is started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from akresil.testing import kafka_jars
from akresil.testing.kafka_cluster import KafkaCluster, KafkaNode
from akresil.testing.kafka_jars import KafkaUnavailable


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_three_brokers_get_a_separate_controller_and_replicated_internal_topics(tmp_path: Path) -> None:
    cluster = KafkaCluster(3)
    cluster.workdir = tmp_path
    cluster._layout()
    assert sorted(cluster.nodes) == [1, 2, 3, 100]
    broker = properties(cluster._node_properties(cluster.nodes[2], 9999))
    assert broker["process.roles"] == "broker"
    assert broker["controller.quorum.bootstrap.servers"] == "127.0.0.1:9999"
    assert broker["offsets.topic.replication.factor"] == "3"
    assert broker["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:")
    controller = properties(cluster._node_properties(cluster.nodes[100], 9999))
    assert controller["process.roles"] == "controller"
    assert "advertised.listeners" not in controller


def test_node_config_adds_entries_to_one_broker_on_top_of_broker_config(tmp_path: Path) -> None:
    cluster = KafkaCluster(3, broker_config={"broker.rack": "any", "num.partitions": 2},
                           node_config={2: {"broker.rack": "r2"}})
    cluster.node_config[3] = {"broker.rack": "r3"}          # may be set before start(), as a conftest does
    cluster.workdir = tmp_path
    cluster._layout()
    racks = {n: properties(cluster._node_properties(cluster.nodes[n], 9999)).get("broker.rack")
             for n in (1, 2, 3, 100)}
    assert racks == {1: "any", 2: "r2", 3: "r3", 100: None}
    with pytest.raises(ValueError, match=r"node_config: \[4\] are not broker ids"):
        KafkaCluster(3, node_config={4: {"broker.rack": "r4"}})


def test_one_broker_is_a_combined_node(tmp_path: Path) -> None:
    cluster = KafkaCluster(1)
    cluster.workdir = tmp_path
    cluster._layout()
    node = cluster.nodes[1]
    assert node.roles == ("broker", "controller") and set(node.ports) == {"PLAINTEXT", "CONTROLLER"}
    props = properties(cluster._node_properties(node, node.ports["CONTROLLER"]))
    assert props["offsets.topic.replication.factor"] == "1"


def test_security_adds_listeners_mechanisms_and_the_authorizer(tmp_path: Path) -> None:
    cluster = KafkaCluster(1, security=True, broker_config={"num.partitions": 4})
    cluster.workdir = tmp_path
    cluster.ca_file = tmp_path / "ca.pem"
    cluster._layout()
    node = cluster.nodes[1]
    assert set(node.ports) == {"PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL", "CONTROLLER"}
    props = properties(cluster._node_properties(node, node.ports["CONTROLLER"]))
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert "User:ANONYMOUS" in props["super.users"]
    assert props["num.partitions"] == "4"   # broker_config wins over the test defaults
    assert cluster.bootstrap("SASL_SSL") == f"127.0.0.1:{node.ports['SASL_SSL']}"
    plain = KafkaCluster(1)
    plain.nodes[1] = KafkaNode(1, ("broker",), tmp_path, {"PLAINTEXT": 1234})
    with pytest.raises(ValueError, match="security=True"):
        plain.bootstrap("SSL")


def test_bad_arguments_name_the_problem() -> None:
    with pytest.raises(ValueError, match="brokers must be 1..9"):
        KafkaCluster(0)
    with pytest.raises(ValueError, match="Kafka version"):
        KafkaCluster(1, version="latest")


def test_no_java_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KafkaUnavailable, match="apt-get install -y openjdk-17-jdk-headless"):
        kafka_jars.java_command()


def test_no_maven_names_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A release akresil ships no jar list for needs Maven."""
    monkeypatch.setenv("PATH", "/nonexistent")
    assert kafka_jars.jar_lock("4.3.1") is None
    with pytest.raises(KafkaUnavailable, match="apt-get install -y maven"):
        kafka_jars.resolve_kafka_jars("4.3.1", cache_dir=tmp_path)
    assert "Maven" in (kafka_jars.kafka_jars_fetchable("4.3.1", cache_dir=tmp_path) or "")


def _fake_repo(tmp_path: Path) -> tuple[Path, list[kafka_jars.LockedJar]]:
    import hashlib
    repo = tmp_path / "repo"
    jars = []
    for path, body in (("org/example/a/1.0/a-1.0.jar", b"jar a"), ("org/example/b/2.0/b-2.0.jar", b"jar b")):
        (repo / path).parent.mkdir(parents=True)
        (repo / path).write_bytes(body)
        jars.append(kafka_jars.LockedJar(path, hashlib.sha256(body).hexdigest()))
    return repo, jars


def test_the_shipped_jar_list_is_fetched_without_maven_and_checked(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """The default release's jars come straight from the Maven repository (here a file:// one), each checked by
    SHA-256, so a machine with Java and no Maven runs Kafka; a jar that differs is refused, naming the mirror."""
    repo, jars = _fake_repo(tmp_path)
    monkeypatch.setattr(kafka_jars.shutil, "which", lambda name: None)
    monkeypatch.setattr(kafka_jars, "jar_lock", lambda version=None: jars)
    monkeypatch.setenv("AKRESIL_MAVEN_REPO", repo.as_uri())
    assert kafka_jars.kafka_jars_fetchable("4.4.0", cache_dir=tmp_path / "cache") is None
    libs = kafka_jars.resolve_kafka_jars("4.4.0", cache_dir=tmp_path / "cache")
    assert sorted(p.name for p in libs.iterdir()) == ["a-1.0.jar", "b-2.0.jar"]
    assert kafka_jars.kafka_jars_cached("4.4.0", cache_dir=tmp_path / "cache")
    (repo / jars[1].path).write_bytes(b"tampered")
    with pytest.raises(KafkaUnavailable, match="b-2.0.jar is not the jar akresil expects.*AKRESIL_MAVEN_REPO"):
        kafka_jars.resolve_kafka_jars("4.4.0", cache_dir=tmp_path / "other")
    assert not kafka_jars.kafka_jars_cached("4.4.0", cache_dir=tmp_path / "other")


def test_an_unreachable_repository_names_the_ways_around_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(kafka_jars.shutil, "which", lambda name: None)
    monkeypatch.setenv("AKRESIL_MAVEN_REPO", (tmp_path / "missing").as_uri())
    with pytest.raises(KafkaUnavailable, match="could not download .*HTTPS_PROXY.*AKRESIL_MAVEN_REPO.*maven"):
        kafka_jars.resolve_kafka_jars("4.4.0", cache_dir=tmp_path)


def test_the_shipped_jar_list_is_the_default_release_s() -> None:
    """tools/gen_kafka_lock.py wrote it from Maven's resolution: the broker, its tools, the client, the logging."""
    jars = kafka_jars.jar_lock(kafka_jars.DEFAULT_KAFKA_VERSION)
    assert jars is not None and len({j.name for j in jars}) == len(jars) > 50
    names = {j.name for j in jars}
    version = kafka_jars.DEFAULT_KAFKA_VERSION
    assert {f"kafka_2.13-{version}.jar", f"kafka-clients-{version}.jar", f"kafka-tools-{version}.jar"} <= names
    assert all(len(j.sha256) == 64 for j in jars)


def test_a_one_broker_cluster_takes_a_port_features_and_jvm_options(tmp_path: Path) -> None:
    cluster = KafkaCluster(1, port=19092, features={"share.version": 1}, jvm_options=["-XX:TieredStopAtLevel=1"])
    cluster.workdir = tmp_path
    cluster._layout()
    cluster._libs = tmp_path
    cluster._java = "java"
    assert cluster.nodes[1].ports["PLAINTEXT"] == 19092
    assert "-XX:TieredStopAtLevel=1" in cluster._jvm_args(cluster.nodes[1])
    with pytest.raises(ValueError, match="only a one-broker cluster takes a fixed port"):
        KafkaCluster(3, port=19092)
    with pytest.raises(ValueError, match="features"):
        KafkaCluster(1, features={"share.version": "on"})     # type: ignore[dict-item]


def test_a_node_whose_owner_is_gone_is_killed_even_if_it_ignores_sigterm() -> None:
    """The watchdog's stdin closes when the test process dies. A broker's SIGTERM is a controlled shutdown that
    waits for the controller, which is going away at the same moment: brokers of a killed run hung there (seen:
    three JVMs still up minutes later). The watchdog kills what is left after the grace period."""
    import subprocess
    import time

    from akresil.testing.kafka_cluster import _watchdog

    child = "trap '' TERM; echo $$; while :; do sleep 0.05; done"   # a JVM stuck in its shutdown
    proc = subprocess.Popen(["/bin/sh", "-c", _watchdog(0.3), "watchdog", "/bin/sh", "-c", child],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert proc.stdin is not None
        proc.stdin.close()                                           # the owner is gone
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if proc.poll() is None:
            import os
            import signal
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """kafka-storage's argument parser reads "-t -abc" as a missing value: such an id is drawn again."""
    from akresil.testing.kafka_cluster import _kafka_cluster_id
    draws = iter([b"\xf8" + bytes(15), b"\x01" * 16])   # the first encodes to "-A...", the second to "AQE..."
    assert _kafka_cluster_id(lambda n: next(draws)) == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_the_controller_checks_group_configs_against_the_same_bounds_as_the_brokers(tmp_path: Path) -> None:
    """IncrementalAlterConfigs on a GROUP resource is forwarded to the controller, which validates it with its
    own group.* settings: without them a 2 s share lock is refused (Kafka's 15 s minimum)."""
    cluster = KafkaCluster(3, broker_config={"group.share.max.record.lock.duration.ms": 90_000,
                                             "num.io.threads": 2})
    cluster.workdir = tmp_path
    cluster._layout()
    controller = properties(cluster._node_properties(cluster.nodes[100], 9999))
    assert controller["group.share.min.record.lock.duration.ms"] == "1000"
    assert controller["group.share.max.record.lock.duration.ms"] == "90000"
    assert "num.io.threads" not in controller        # other broker settings stay the brokers'


def test_spark_connector_jars_are_what_pyspark_lacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Spark's Kafka connector resolves into its own folder (its kafka-clients is not the broker's); only the jars
    whose artifact the PySpark install lacks go to ``spark.jars``, whatever their versions."""
    monkeypatch.setattr(kafka_jars.shutil, "which", lambda name: None)   # no Maven: must come from the cache
    root = tmp_path / "spark-sql-kafka" / "4.2.0"
    (root / "libs").mkdir(parents=True)
    for jar in ("commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
                "spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "hadoop-client-api-3.5.0.jar",
                "scala-library-2.13.15.jar", "lz4-java-1.10.1.jar"):
        (root / "libs" / jar).touch()
    (root / "resolved.txt").write_text("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 -spark-sql -spark-core")
    provided = tmp_path / "pyspark-jars"
    provided.mkdir()
    for jar in ("hadoop-client-api-3.5.0.jar", "scala-library-2.13.18.jar", "lz4-java-1.11.0.jar",
                "spark-sql_2.13-4.3.0.jar"):
        (provided / jar).touch()
    jars = kafka_jars.resolve_spark_kafka_jars("4.2.0", cache_dir=tmp_path, provided=provided)
    assert [j.name for j in jars] == ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar",
                                      "spark-sql-kafka-0-10_2.13-4.2.0.jar",
                                      "spark-token-provider-kafka-0-10_2.13-4.2.0.jar"]
    with pytest.raises(KafkaUnavailable, match="Maven"):          # another version is not in the cache
        kafka_jars.resolve_spark_kafka_jars("4.1.0", cache_dir=tmp_path, provided=provided)
    with pytest.raises(ValueError, match="4.2.0"):
        kafka_jars.resolve_spark_kafka_jars("latest", cache_dir=tmp_path)


def test_plugin_classpath_follows_kafkas_jars(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    cluster = KafkaCluster(1, classpath=[plugin], broker_config={"metric.reporters": "example.Reporter"})
    cluster._libs = tmp_path / "libs"
    assert cluster._classpath().split(os.pathsep) == [str(tmp_path / "libs" / "*"), str(plugin)]
    with pytest.raises(ValueError, match="classpath: .*missing does not exist"):
        KafkaCluster(1, classpath=[tmp_path / "missing"])


@pytest.mark.parametrize("features", [{"transaction.version": -1}, {"transaction.version": "2"},
                                      {"transaction.version": True}, {7: 1}])
def test_bad_feature_levels_are_refused(features: dict) -> None:
    with pytest.raises(ValueError, match="KafkaCluster features"):
        KafkaCluster(1, features=features)
