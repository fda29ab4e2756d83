"""The node-agent skeleton (`services._agent`): settings through one converter with errors naming each
variable, chores on a hand-moved clock, say-once logging, back-off, the probe file, the loop stopping on
its event and on SIGTERM, the ``sh`` logger kept quiet, and publishing only what changed."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import threading

import attrs
import pytest

from metax_core.errors import InvalidSpec
from metax_core.node import publish as core_publish
from services._agent import loop, probe, settings
from services._agent.settings import Seconds, env


@attrs.frozen(kw_only=True)
class Example(settings.NodeAgentSettings):
    interval: Seconds = attrs.field(default=Seconds(3.0), metadata=env("EXAMPLE_INTERVAL"))
    enabled: bool = attrs.field(default=False, metadata=env("EXAMPLE_ENABLED"))
    count: int = attrs.field(default=1, metadata=env("EXAMPLE_COUNT"))


def test_settings_read_every_kind_of_value() -> None:
    got = settings.load(
        Example,
        {
            "NODE_NAME": "n1",
            "EXAMPLE_INTERVAL": "2.5",
            "EXAMPLE_ENABLED": "yes",
            "EXAMPLE_COUNT": "7",
            "METAX_REQUIRED_COMPONENTS": "gpu-label, driver,gpu-label",
            "METAX_HOST_ROOT": "/host",
        },
    )
    assert (got.interval, got.enabled, got.count) == (2.5, True, 7)
    assert got.required_components == ("gpu-label", "driver")
    assert got.host_path("/sys") == pathlib.Path("/host/sys")
    assert settings.load(Example, settings.render_env(got)) == got


def test_settings_errors_name_every_variable_at_once() -> None:
    with pytest.raises(InvalidSpec) as caught:
        settings.load(Example, {"EXAMPLE_INTERVAL": "-2", "EXAMPLE_ENABLED": "perhaps", "EXAMPLE_COUNT": "x"})
    assert [e.path for e in caught.value.errors] == [
        "NODE_NAME",
        "EXAMPLE_INTERVAL",
        "EXAMPLE_ENABLED",
        "EXAMPLE_COUNT",
    ]
    text = str(caught.value)
    assert "NODE_NAME: must be set" in text
    assert "must be true or false, got 'perhaps'" in text
    assert "must be an integer, got 'x'" in text


def test_chores_come_due_on_the_clock() -> None:
    now = [0.0]
    chores = loop.Chores(lambda: now[0])
    assert chores.due("a", 10)
    assert not chores.due("a", 10)
    now[0] = 10
    assert chores.due("a", 10)
    chores.soon("a")
    assert chores.due("a", 10)
    chores.later("a", 100)
    now[0] = 50
    assert not chores.due("a", 10)


def test_say_logs_a_message_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    say = loop.Say(logging.getLogger("t"))
    assert say("x", "one") and not say("x", "one") and say("x", "two")
    say.forget("x")
    assert say("x", "two")
    assert [r.message for r in caplog.records] == ["one", "two", "two"]


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [loop.backoff(n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert loop.backoff(30) == 300.0


def test_sh_logs_no_process_start_at_info() -> None:
    loop.setup_logging({"METAX_LOG_LEVEL": "INFO"})
    assert logging.getLogger("sh").getEffectiveLevel() == logging.WARNING
    assert not logging.getLogger("sh.command").isEnabledFor(logging.INFO)


def test_probe_file_exists_only_while_ready(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ready"
    path.write_text("left by the previous container\n")
    p = probe.ProbeFile(path)
    p.report(False, "metax 2.18.0 is loaded, 2.20.0 is wanted")
    assert not path.exists() and not p.present  # not ready means no file, whatever the agent's round did
    p.report(True, "ok")
    assert path.read_text() == "ok\n" and p.present
    p.not_ready()
    assert not path.exists()


def test_probe_file_is_quiet_in_steady_state(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ready"
    p = probe.ProbeFile(path)
    p.report(True, "ok")
    written = path.stat().st_mtime_ns, path.stat().st_ino
    p.report(True, "ok")
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == written  # not rewritten
    p.report(False, "broken")
    path.write_text("someone else's file\n")  # removed once; later rounds do not touch the path again
    p.report(False, "broken")
    assert path.exists()
    p.report(True, "ok again")
    assert path.read_text() == "ok again\n"


class Counting:
    name = "counting"

    def __init__(self, stop: threading.Event, after: int) -> None:
        self.ticks, self.stopped, self.stop, self.after = 0, False, stop, after

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks == self.after:
            self.stop.set()

    def shutdown(self) -> None:
        self.stopped = True


def test_serve_ticks_until_stopped_then_shuts_down() -> None:
    stop = threading.Event()
    agent = Counting(stop, after=3)
    loop.serve(agent, stop, tick=0.001)
    assert (agent.ticks, agent.stopped) == (3, True)


def test_sigterm_stops_the_run_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[bool] = []

    def run(stop: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        seen.append(stop.wait(5))

    loop.run_until_signalled(run)
    assert seen == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_publish_changes_only_what_differs() -> None:
    have = {"a": "1", "b": "2", "other": "x"}
    assert core_publish.changes(have, {"a": "1", "b": "3", "c": None, "d": "4"}) == {"b": "3", "d": "4"}
    assert core_publish.changes(have, {"a": None}) == {"a": None}
    assert core_publish.changes(have, {"a": "1"}) == {}


def test_health_checks_log_nothing_at_info(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    from metax_hw_fake import builder

    fake = builder.FakeHostBuilder().gpus(2).build(tmp_path / "host")
    loop.setup_logging({"METAX_LOG_LEVEL": "INFO"})
    caplog.set_level(logging.INFO)
    for _ in range(3):
        fake.hw.monitor.health()
    assert [r for r in caplog.records if r.levelno <= logging.INFO] == []


def test_watches_wake_the_agent_when_its_config_map_changes() -> None:
    from metax_k8s.inmemory import cluster as inmemory
    from services._agent import watch

    k8s = inmemory.InMemoryCluster()
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}, field_manager="t")
    seen: list[str] = []
    woke = threading.Event()

    def changed(chore: str) -> None:
        seen.append(chore)
        woke.set()

    watches = watch.Watches(k8s.objects, changed, resync=30)
    watches.start(watch.Target("v1", "ConfigMap", "driver-config", "ns", "sync"))
    try:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "ns"}}
        k8s.objects.apply(body, field_manager="t")
        k8s.objects.apply({**body, "metadata": {"name": "driver-config", "namespace": "ns"}}, field_manager="t")
        assert woke.wait(10)
        assert seen == ["sync"]  # the other ConfigMap woke nothing
    finally:
        watches.close()
