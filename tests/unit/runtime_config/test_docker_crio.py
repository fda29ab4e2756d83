"""Docker's daemon.json edit and CRI-O's drop-in (C4, R-INSTALL): round trips, CDI by version, refusals."""

from __future__ import annotations

import json

import pytest
import tomlkit

from metax_core.errors import InvalidSpec
from metax_core.runtime import crio, docker, handler, record

WRAPPER = handler.WRAPPER_HOST_PATH
CASES = [
    None,
    "",
    "{}\n",
    '{\n  "log-driver": "json-file",\n  "log-opts": {"max-size": "10m"}\n}\n',
    '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}, "default-runtime": "nvidia"}',
    '{"features": {"buildkit": true}, "data-root": "/srv/docker"}',
]


@pytest.mark.parametrize("text", CASES)
@pytest.mark.parametrize("version", [(20, 10, 24), (25, 0, 3), (28, 1, 1), (28, 2, 0)])
def test_configure_then_undo_gives_the_text_back_and_twice_changes_nothing(
    text: str | None, version: tuple[int, int, int]
) -> None:
    done = docker.configure(text, version=version, wrapper=WRAPPER)
    doc = json.loads(done.text)
    assert doc["runtimes"]["metax"] == {"path": WRAPPER}
    assert doc.get("default-runtime") == (json.loads(text).get("default-runtime") if text else None)
    assert ("cdi" in doc.get("features", {})) is (docker.cdi_feature_needed(version) or "cdi" in (text or ""))
    assert done.cdi is (version[:2] >= (25, 0))
    again = docker.configure(done.text, version=version, wrapper=WRAPPER)
    assert again.edits == () and again.text == done.text
    entry = record.remember(None, docker.PATH, text, done.text, done.edits, owned=False)
    assert record.undo_text(entry, done.text, lambda t: t) == text  # byte for byte (None: no file before)
    structural = docker.unconfigure(done.text, done.edits)
    assert json.loads(structural) == (json.loads(text) if text and text.strip() else {})


def test_an_administrators_false_cdi_stays_and_is_reported() -> None:
    done = docker.configure('{"features": {"cdi": false}}', version=(26, 1, 0), wrapper=WRAPPER)
    assert json.loads(done.text)["features"] == {"cdi": False} and not done.cdi


def test_an_administrators_change_survives_the_undo() -> None:
    done = docker.configure('{"log-level": "info"}', version=(27, 0, 0), wrapper=WRAPPER)
    changed = json.loads(done.text) | {"log-level": "debug"}
    undone = docker.unconfigure(json.dumps(changed), done.edits)
    assert json.loads(undone) == {"log-level": "debug"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "is not valid JSON"),
        ('{"runtimes": []}', "runtimes: must be an object"),
        ('{"runtimes": {"metax": {"path": "/other"}}}', "not ours"),
        ('{"features": true}', "features: must be an object"),
    ],
)
def test_bad_daemon_json_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        docker.configure(text, version=(26, 0, 0), wrapper=WRAPPER)


def test_loaded_reads_dockerd_info() -> None:
    info = {"Runtimes": {"runc": {"path": "runc"}, "metax": {"path": WRAPPER}}}
    assert docker.handler_loaded(info, WRAPPER)[0]
    assert not docker.handler_loaded({"Runtimes": {"runc": {"path": "runc"}}}, WRAPPER)[0]


def test_crio_dropin_declares_only_the_handler() -> None:
    doc = tomlkit.parse(crio.dropin(WRAPPER)).unwrap()
    assert doc == {"crio": {"runtime": {"runtimes": {"metax": dict(crio.handler_entry(doc) or {})}}}}
    assert crio.handler_entry(doc) == {"runtime_path": WRAPPER, "runtime_type": "oci", "runtime_root": "/run/runc"}
    assert crio.DROPIN.startswith(crio.DROPIN_DIR + "/") and crio.DROPIN.endswith(".conf")
    assert crio.handler_entry({"crio": {"runtime": {"runtimes": {"runc": {}}}}}) is None


def test_crio_dropin_path_follows_the_configured_directory() -> None:
    assert crio.dropin_path() == crio.DROPIN
    assert crio.dropin_path("/srv/crio/conf.d/") == "/srv/crio/conf.d/99-metax.conf"


def test_crio_config_output_is_checked_for_our_handler() -> None:
    """``crio config`` prints the effective configuration, defaults commented out: ours must be in it, running the
    wrapper (a later drop-in of someone else's could name another binary)."""
    ours = "# a comment\n[crio.runtime]\n#log_level = 'info'\n" + crio.dropin(WRAPPER).replace(crio.HEADER, "")
    assert crio.checked(ours, WRAPPER) == (True, f"crio runtime handler 'metax' loaded ({WRAPPER})")
    ok, why = crio.checked(ours.replace(WRAPPER, "/usr/bin/true"), WRAPPER)
    assert not ok and "runs '/usr/bin/true', not" in why
    ok, why = crio.checked("[crio.runtime.runtimes.runc]\nruntime_path = ''\n", WRAPPER)
    assert not ok and "has no runtime handler 'metax'" in why
    ok, why = crio.checked("[crio.runtime\n", WRAPPER)
    assert not ok and "crio config: is not TOML" in why


def test_crio_running_config_is_read_by_the_same_rule() -> None:
    running = tomlkit.parse(crio.dropin(WRAPPER)).unwrap()
    assert crio.handler_loaded(running, WRAPPER)[0]
    assert crio.handler_loaded({}, WRAPPER) == (False, "the running crio has no runtime handler 'metax'")
    with pytest.raises(InvalidSpec, match="GET /config: is not TOML"):
        crio.parse("[[x", "GET /config")


@pytest.mark.parametrize(("version", "supported"), [((1, 22, 9), False), ((1, 23, 0), True), ((1, 33, 1), True)])
def test_crio_older_than_kubernetes_1_23s_is_refused(version: tuple[int, int, int], supported: bool) -> None:
    if supported:
        crio.check_version(version)
    else:
        with pytest.raises(InvalidSpec, match=r"crio: version 1\.22\.9 is too old; 1\.23 or later"):
            crio.check_version(version)
