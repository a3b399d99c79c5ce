"""Users' code type-checks: ``mypy --strict`` (and ``pyright`` in strict mode, where it runs) pass on examples/
and on the Python blocks of docs/getting-started.md and docs/typing.md, and the public signatures are precise: a sample of user
code must reveal the documented types (serializer overloads, ``ConsumerRecord[K, V]`` from deserializers) and
must be rejected exactly where it is wrong (an unknown config key, a bad choice, a value the serializer does not
take).  akresil is found the way a user's checker finds an installed package (on the interpreter's path)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from akresil import config as config_table
from akresil.config_keys import AdminConfig, ConsumerConfig, ProducerConfig, ShareConsumerConfig

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
DOC_PAGES = ("getting-started.md", "typing.md")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)

#: user code with its expected verdicts: ``# reveal: TEXT`` (mypy's revealed type contains TEXT) or
#: ``# error: CODE [TEXT]`` (mypy reports error CODE on that line, with TEXT in its message; pyright an error
#: too); no other line may fail
API_SAMPLE = '''
import json
from typing import Any

from akresil import Admin, Consumer, ConsumerRecord, Hook, Producer, ShareConsumer, TopicPartition
from akresil.otel import instrument_consumer, instrument_producer, instrument_share_consumer
from akresil.testing import BrokerControl, EmbeddedBroker, FaultProxy, FaultProxyControl, KafkaCluster
from akresil.testing.rdkafka_mock import MockCluster, MockControl


def controls(cluster: KafkaCluster, broker: EmbeddedBroker, proxy: FaultProxy, mock: MockCluster) -> list[BrokerControl]:
    return [cluster, broker, FaultProxyControl(proxy), MockControl(mock)]  # each test broker's control is one


def not_a_control(proxy: FaultProxy) -> BrokerControl:
    return proxy  # error: return-value


class Counting(Hook):
    def on_batch_sent(self, *, topic: str, records: int, **_: Any) -> None:
        print(topic, records)

    def on_records_consumed(self, *, topic: str, records: str, **_: Any) -> None:  # error: override "on_records_consumed" incompatible with supertype
        print(topic, records)


def to_json(order: dict[str, int]) -> bytes:
    return json.dumps(order).encode()


async def publish(producer: Producer[bytes, dict[str, int]]) -> None:
    await producer.send("orders", {"amount": 4})


async def drain(consumer: Consumer[str, Any], jobs: ShareConsumer) -> None:
    await consumer.getmany(timeout_ms=0)
    await jobs.getmany(timeout_ms=0)


async def main() -> None:
    orders = Producer(bootstrap_servers="127.0.0.1:9092", value_serializer=to_json)
    reveal_type(orders)  # reveal: Producer[bytes | bytearray | memoryview[int], dict[str, int]]
    await orders.send("orders", {"amount": 1}, key=b"alice")
    await orders.send("orders", b"raw")  # error: arg-type
    raw = Producer(bootstrap_servers="127.0.0.1:9092", acks="all", compression_type="zstd", hooks=[Counting()])
    reveal_type(raw)  # reveal: Producer[bytes | bytearray | memoryview[int], bytes | bytearray | memoryview[int]]
    await raw.send("orders", bytearray(b"v"), key=memoryview(b"k"))
    plain: Producer[bytes, bytes] = raw
    await plain.send_many("orders", [(None, b"v"), (b"k", None)])
    texts = Producer(key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode())
    reveal_type(texts)  # reveal: Producer[str, Any]
    Producer(bootstrap_servers="127.0.0.1:9092", linger_msec=5)  # error: call-arg "linger_msec" for "Producer"
    Producer(acks="some")  # error: arg-type Argument "acks" to "Producer" has incompatible type "Literal['some']"
    Producer(linger_ms="5")  # error: arg-type Argument "linger_ms" to "Producer" has incompatible type "str"; expected "int"
    Producer(value_serializer=b"not callable")  # error: arg-type Argument "value_serializer" to "Producer"

    typed = Consumer("orders", group_id="g", key_deserializer=bytes.decode, value_deserializer=json.loads)
    record = await typed.getone()
    reveal_type(record.key)  # reveal: str | None
    reveal_type(record.value)  # reveal: Any | None
    batches = await typed.getmany(timeout_ms=100)
    reveal_type(batches)  # reveal: list[tuple[str, int, int, str | None, Any | None
    untyped = Consumer("orders", auto_offset_reset="earliest")
    async for r in untyped:
        reveal_type(r.value)  # reveal: bytes | None
        break
    first: ConsumerRecord = await untyped.getone()
    typed_first: ConsumerRecord[str, Any] = await typed.getone()
    wrong: ConsumerRecord[str, Any] = await untyped.getone()  # error: assignment
    Consumer("orders", auto_offset_reset="earliest-ish")  # error: arg-type Argument "auto_offset_reset" to "Consumer"
    Consumer("orders", group_idd="g")  # error: call-arg "group_idd" for "Consumer"; did you mean "group_id"?
    jobs = ShareConsumer("jobs", group_id="workers", value_deserializer=json.loads, max_poll_records=50)
    ShareConsumer("jobs", group_id="workers", auto_offset_reset="earliest")  # error: call-arg "auto_offset_reset" for "ShareConsumer"
    ShareConsumer("jobs", client_id="w1")  # error: call-arg "group_id"
    ShareConsumer("jobs", group_id="workers", acknowledgement_mode="manual")  # error: arg-type "acknowledgement_mode"
    Admin(request_timeout_ms=1.5)  # error: arg-type Argument "request_timeout_ms" to "Admin" has incompatible type
    print(jobs)
    await typed.commit({TopicPartition("orders", 0): 5, TopicPartition("orders", 1): (6, "note")})
    await typed.commit({TopicPartition("orders", 0): "5"})  # error: dict-item
    print(first, typed_first, wrong)

    traced = instrument_producer(orders)
    reveal_type(traced)  # reveal: Producer[bytes | bytearray | memoryview[int], dict[str, int]]
    await traced.send("orders", {"amount": 2})
    await publish(traced)  # a traced producer is the producer: it goes where one is annotated
    traced_consumer = instrument_consumer(typed)
    reveal_type(traced_consumer)  # reveal: Consumer[str, Any]
    await drain(traced_consumer, instrument_share_consumer(jobs))
    async with instrument_consumer(Consumer("orders")) as entered:
        reveal_type(entered)  # reveal: Consumer[bytes, bytes]
        with entered.process(await entered.getone()):
            pass
    with traced_consumer.process(await traced_consumer.getone()) as span:
        span.set_attribute("handled", True)
'''


def doc_blocks() -> dict[str, str]:
    blocks = {}
    for page in DOC_PAGES:
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m.group(1) == "python":
                line = text.count("\n", 0, m.start()) + 1
                blocks[f"{page.removesuffix('.md').replace('-', '_')}_l{line}.py"] = m.group(2)
    return blocks


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/, the docs' blocks and the API sample as files of one user project."""
    project = tmp_path_factory.mktemp("user-project")
    for example in (ROOT / "examples").glob("*.py"):
        shutil.copy(example, project / example.name)
    for name, code in doc_blocks().items():
        (project / name).write_text(code, encoding="utf-8")
    (project / "api_sample.py").write_text(API_SAMPLE.lstrip("\n"), encoding="utf-8")
    return project


def expectations() -> tuple[dict[int, str], dict[int, str]]:
    reveals, errors = {}, {}
    for number, line in enumerate(API_SAMPLE.lstrip("\n").splitlines(), 1):
        if "# reveal: " in line:
            reveals[number] = line.split("# reveal: ", 1)[1]
        elif "# error: " in line:
            errors[number] = line.split("# error: ", 1)[1]
    return reveals, errors


@pytest.fixture(scope="module")
def mypy_report(user_code: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, int, str, str]]:
    """(file, line, severity, message) for everything ``mypy --strict`` says about the project."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    # a separate interpreter with this checkout first on its path, as an installed package is: mypy run in this
    # process reads this process's sys.path, where an editable install's import hook is invisible to it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--no-error-summary",
                           "--show-error-codes", "--hide-error-context", "."],
                          cwd=user_code, env=env, capture_output=True, text=True, timeout=600)
    stdout, stderr = done.stdout, done.stderr
    assert not stderr, stderr
    report = []
    for line in stdout.splitlines():
        m = re.match(r"^(.*?\.py):(\d+): (error|note): (.*)$", line)
        assert m is not None, f"unparsed mypy output: {line}"
        report.append((Path(m.group(1)).name, int(m.group(2)), m.group(3), m.group(4)))
    return report


def test_examples_and_doc_blocks_pass_mypy_strict(mypy_report: list[tuple[str, int, str, str]]) -> None:
    assert doc_blocks(), "no Python blocks found in the docs"
    problems = [entry for entry in mypy_report if entry[0] != "api_sample.py"]
    assert problems == []


def test_public_signatures_reveal_precise_types(mypy_report: list[tuple[str, int, str, str]]) -> None:
    reveals, errors = expectations()
    sample = [(line, severity, message) for name, line, severity, message in mypy_report if name == "api_sample.py"]
    revealed = {line: message for line, severity, message in sample if message.startswith("Revealed type is")}
    for line, expected in reveals.items():
        assert expected in revealed.get(line, ""), f"api_sample.py:{line}: {revealed.get(line)!r} lacks {expected!r}"
    found_errors = {line: message for line, severity, message in sample if severity == "error"}
    assert set(found_errors) == set(errors), found_errors
    for line, expected in errors.items():
        code, _, text = expected.partition(" ")
        assert f"[{code}]" in found_errors[line], (line, found_errors[line])
        assert text in found_errors[line], f"api_sample.py:{line}: {found_errors[line]!r} lacks {text!r}"
    # one signature per client: a mistake is one line naming the keyword, not a list of overload variants
    assert not [entry for entry in sample if "overload" in entry[2]]
    # docs/typing.md's "now it prints" messages are mypy's messages for the same mistakes in the sample
    page = (ROOT / "docs" / "typing.md").read_text(encoding="utf-8")
    shown = re.search(r"Now it prints:\n\n```text\n(.*?)```", page, re.S)
    assert shown is not None
    for line in shown.group(1).splitlines():
        message = line.split(": error: ", 1)[1]
        assert message in found_errors.values(), f"docs/typing.md shows {message!r}, mypy says otherwise"
    extra_notes = [entry for entry in sample if entry[1] == "note" and entry[0] not in revealed
                   and entry[0] not in errors]
    assert extra_notes == []


def test_pyright_strict_agrees(user_code: Path) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which("pyright")
    if pyright is None:
        pytest.skip("pyright is not installed (pip install pyright)")
    if shutil.which("node") is None:
        pytest.skip("pyright needs a node runtime on PATH (its PyPI wrapper would try to download one)")
    (user_code / "pyrightconfig.json").write_text(json.dumps({
        "typeCheckingMode": "strict", "extraPaths": [str(ROOT)], "pythonVersion": "3.11",
        "exclude": ["**/__pycache__"]}), encoding="utf-8")
    try:
        done = subprocess.run([pyright, "--outputjson", "--pythonpath", sys.executable, str(user_code)],
                              capture_output=True, text=True, timeout=240, cwd=user_code)
    except subprocess.TimeoutExpired:
        pytest.skip("pyright did not finish in 240 s (fetching its npm package without a network?)")
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.skip(f"pyright did not run here (no node runtime?): {done.stderr.strip()[-300:]}")
    diagnostics = [d for d in result["generalDiagnostics"] if d["severity"] == "error"]
    outside = [d for d in diagnostics if Path(d["file"]).name != "api_sample.py"]
    assert outside == []
    _, errors = expectations()
    lines = {d["range"]["start"]["line"] + 1 for d in diagnostics if Path(d["file"]).name == "api_sample.py"}
    assert lines == set(errors), [d["message"] for d in diagnostics]


@pytest.mark.parametrize(("kind", "typed_dict", "extra"), [
    ("producer", ProducerConfig, {"hooks"}),
    ("consumer", ConsumerConfig, {"hooks", "max_buffered_bytes"}),
    ("share", ShareConsumerConfig, {"hooks"}),
    ("admin", AdminConfig, set()),
])
def test_config_typed_dicts_match_the_config_table(kind: str, typed_dict: type, extra: set[str]) -> None:
    if kind == "share":     # the consumer's keys but those a share group leaves to the broker
        from akresil.share_consumer import _NOT_FOR_SHARE
        options = {o.name: o for o in config_table.options_for("consumer") if o.name not in _NOT_FOR_SHARE}
    else:
        options = {o.name: o for o in config_table.options_for(kind)}
    from prometheus_client import CollectorRegistry

    from akresil.core.partitioner import Partitioner

    hints = typing.get_type_hints(typed_dict, localns={"CollectorRegistry": CollectorRegistry,
                                                       "Partitioner": Partitioner})
    assert set(hints) == set(options) | extra
    for name, option in options.items():
        args = typing.get_args(hints[name])
        if kind == "share" and name == "group_id":     # nullable for a consumer, required for a share consumer
            full = typing.get_type_hints(typed_dict, include_extras=True, localns={
                "CollectorRegistry": CollectorRegistry, "Partitioner": Partitioner})[name]
            assert typing.get_origin(full) is typing.Required and typing.get_args(full) == (str,)
            continue
        assert (type(None) in args) == option.nullable, f"{kind}.{name}: nullability differs from the table"
        if option.choices is not None:
            literal = next(a for a in [hints[name], *args] if typing.get_origin(a) is typing.Literal)
            assert set(typing.get_args(literal)) == set(option.choices), f"{kind}.{name}: choices differ"


def test_the_package_passes_mypy_strict() -> None:
    """akresil itself is typed as its users' code is checked: ``mypy --strict akresil`` reports nothing (the mypy
    settings in pyproject.toml name the dependencies that ship no type information)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
                           "--cache-dir", os.devnull, "akresil"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.stdout == "" and done.returncode == 0, done.stdout + done.stderr
