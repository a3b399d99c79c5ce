"""The pytest plugin (``akresil.pytest_plugin``) run the way users run it: inner pytest sessions
started by ``pytester``, with plugin autoloading off and the plugins named explicitly, so the result does not
depend on what else this environment has installed.  Each inner session starts its own embedded broker."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "akresil.pytest_plugin"


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str,
        broker: str | None = "tansu") -> pytest.RunResult:
    """An inner session; ``broker``: its ``--kafka-broker`` (Tansu, which these tests were written for, starts in
    well under a second; None leaves the choice to the ini file or the default, "auto")."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    chosen = () if broker is None else (f"--kafka-broker={broker}",)
    return pytester.runpytest("-p", PLUGIN, "-p", "anyio.pytest_plugin", "-p", "pytest_asyncio.plugin",
                              "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function",
                              # this outer session imported the plugin already, so the inner one cannot rewrite it
                              "-W", "ignore::pytest.PytestAssertRewriteWarning", *chosen, *args)


def run_with(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, runner: str, *args: str
             ) -> pytest.RunResult:
    """Like a fresh user project with only akresil and one async test runner installed (on Tansu, see ``run``)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester.runpytest("-p", PLUGIN, "-p", runner, "-p", "no:cacheprovider", "--kafka-broker=tansu",
                              "-W", "ignore::pytest.PytestAssertRewriteWarning", *args)


def section_blocks(page: str, heading: str) -> list[str]:
    """The python blocks of one section of a docs page (up to the next heading of the same or a higher level)."""
    start = page.index(heading + "\n") + len(heading) + 1
    level = len(heading.split(" ")[0])
    end = re.search(r"^#{1,%d} " % level, page[start:], re.M)
    section = page[start:start + end.start()] if end else page[start:]
    return re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)


RUNNERS = {"pytest-asyncio": "pytest_asyncio.plugin", "anyio": "anyio.pytest_plugin"}


@pytest.mark.parametrize("runner", ["pytest-asyncio", "anyio"])
def test_the_first_test_on_the_testing_page_runs_as_it_stands(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch, runner: str) -> None:
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    blocks = dict(zip(RUNNERS, section_blocks(page, "### Your first test")))
    assert list(blocks) == list(RUNNERS), "the section shows one file per runner"
    name = "test_first_" + runner.replace("pytest-", "")
    pytester.makepyfile(**{name: blocks[runner]})
    run_with(pytester, monkeypatch, RUNNERS[runner], "-q").assert_outcomes(passed=1)


def test_the_own_fixtures_example_on_the_testing_page_runs_as_it_stands(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    # the async file, then the blocking-form test that goes with it (it uses that file's ``broker`` fixture)
    async_file, sync_test = section_blocks(page, "## Without the plugin: your own fixtures")
    pytester.makepyfile(test_own_fixtures=async_file + "\n\n" + sync_test)
    run_with(pytester, monkeypatch, RUNNERS["pytest-asyncio"], "-q").assert_outcomes(passed=2)


def test_the_entry_point_names_the_plugin_module() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"akresil": PLUGIN}
    __import__(PLUGIN)


def test_the_documented_example_service_tests_pass(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("order_service.py", "test_order_service.py"):
        shutil.copy(ROOT / "examples" / name, pytester.path / name)
    result = run(pytester, monkeypatch, "-v", "test_order_service.py")
    # anyio's default ``anyio_backend`` runs each test on every installed backend: asyncio and trio here
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*test_transient_broker_errors_are_retried_with_backoff?asyncio? PASSED*",
                                 "*test_transient_broker_errors_are_retried_with_backoff?trio? PASSED*"],
                                consecutive=False)


def test_fixtures_under_pytest_asyncio_and_anyio_on_asyncio_and_trio(pytester: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_inner='''
        import anyio
        import pytest
        from akresil import Admin, Consumer, Producer, TopicPartition

        created = []

        async def roundtrip(bootstrap, topic):
            async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
                md = await producer.send(topic, b"v", key=b"k")
            async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50) as consumer:
                consumer.assign([TopicPartition(topic, md.partition)])
                got = await consumer.getmany(timeout_ms=5000)
            return [r.value for rs in got.values() for r in rs]

        @pytest.mark.asyncio
        async def test_pytest_asyncio(kafka_bootstrap, kafka_topic_factory, kafka_broker):
            topic = await kafka_topic_factory(partitions=2, prefix="pa")
            created.append(topic)
            assert topic.startswith("pa-") and kafka_broker.kind == "tansu"
            assert await roundtrip(kafka_bootstrap, topic) == [b"v"]
            async with Admin(bootstrap_servers=kafka_bootstrap) as admin:
                assert topic in await admin.list_topics()

        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            return request.param

        @pytest.mark.anyio
        async def test_anyio_through_the_proxy(kafka_proxy, kafka_faults, kafka_topic_factory, anyio_backend):
            topic = await kafka_topic_factory()
            async with kafka_faults.node_down(2):
                assert not kafka_proxy.is_node_up(2)
            assert kafka_proxy.is_node_up(2)
            epoch = await kafka_faults.move_leader(topic, 0, to_node=3)
            assert kafka_proxy.leader(topic, 0) == (3, epoch)
            assert await roundtrip(kafka_proxy.bootstrap_servers, topic) == [b"v"]
            assert kafka_proxy.requests(0, node=3, partition=(topic, 0))

        @pytest.mark.kafka_proxy(nodes=5, coordinator_node=4)
        def test_marker_configures_the_proxy(kafka_proxy):
            assert kafka_proxy.node_ids == (1, 2, 3, 4, 5)

        @pytest.mark.anyio
        async def test_topics_are_deleted_after_their_test(kafka_bootstrap):
            assert created
            async with Admin(bootstrap_servers=kafka_bootstrap) as admin:
                assert created[0] not in await admin.list_topics()
    ''')
    result = run(pytester, monkeypatch, "-q")
    result.assert_outcomes(passed=6)      # the two anyio tests run on asyncio and on trio


def test_a_group_consumer_with_default_settings_gets_its_first_record_in_seconds(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tansu holds every JoinGroup for half the group's session timeout: 22.5 s with the default 45 s. The plugin's
    # broker caps what Tansu sees (a 3 s hold); no wall-clock bound here (the cap itself is unit-tested in
    # test_session_cap.py): the test checks the plugin's broker has the cap and a default group gets its record
    pytester.makepyfile(test_group='''
        import anyio
        import pytest
        from akresil import Consumer, Producer

        @pytest.mark.asyncio
        async def test_group_start(kafka_broker, kafka_bootstrap, kafka_topic_factory):
            assert kafka_broker.group_session_cap_ms == 6000
            topic = await kafka_topic_factory()
            async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
                await producer.send(topic, b"first")
            async with Consumer(topic, bootstrap_servers=kafka_bootstrap, group_id="g-defaults",
                                auto_offset_reset="earliest") as consumer:
                with anyio.fail_after(120):      # a hang guard, not a speed bound
                    record = await consumer.getone()
            assert record.value == b"first"
    ''')
    run(pytester, monkeypatch, "-q").assert_outcomes(passed=1)


def test_broker_kind_from_the_command_line_and_the_ini_file(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("noida_db")
    pytester.makepyfile(test_kind='''
        import os
        def test_kind(kafka_broker):
            assert kafka_broker.kind == os.environ["EXPECTED_KIND"]
    ''')
    monkeypatch.setenv("EXPECTED_KIND", "noida")
    run(pytester, monkeypatch, "-q", "--kafka-broker=noida").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nkafka_broker = noida\n")
    run(pytester, monkeypatch, "-q", broker=None).assert_outcomes(passed=1)
    monkeypatch.setenv("EXPECTED_KIND", "tansu")
    run(pytester, monkeypatch, "-q", "--kafka-broker=tansu").assert_outcomes(passed=1)   # the option wins


def test_the_default_broker_without_java_is_tansu_and_the_summary_says_why(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The default is "auto": Apache Kafka where Java 17+ is. Without Java the session runs on Tansu, and the
    terminal summary says so with the fix (the log's WARNING alone is captured where nobody looks)."""
    pytester.makepyfile(test_kind='''
        def test_kind(kafka_broker):
            assert kafka_broker.requested_kind == "auto" and kafka_broker.kind == "tansu"
    ''')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    result = run(pytester, monkeypatch, "-q", broker=None)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*akresil: kafka_broker ran Tansu, not Apache Kafka: *Java 17+*apt-get install*"])


def test_bad_configuration_is_named(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_bad='''
        import pytest
        def test_kind(kafka_broker):
            pass
        @pytest.mark.kafka_proxy(3)
        def test_positional(kafka_proxy):
            pass
    ''')
    pytester.makeini("[pytest]\nkafka_broker = kafka-4\n")
    result = run(pytester, monkeypatch, "-q", broker=None)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*kafka_broker: expected one of auto, kafka, tansu, noida, apache, got 'kafka-4'*"])
    pytester.makeini("[pytest]\n")
    result = run(pytester, monkeypatch, "-q", "-k", "positional")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*kafka_proxy takes keyword arguments only*"])


def test_the_testing_page_shows_the_example_files_verbatim() -> None:
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", page, re.S | re.M)
    for name in ("order_service.py", "test_order_service.py"):
        assert (ROOT / "examples" / name).read_text(encoding="utf-8") in blocks, f"docs/testing.md: {name} differs"
