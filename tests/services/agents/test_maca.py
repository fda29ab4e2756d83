"""The maca agent on a temporary host root and the in-memory cluster (C6, R-MACA, R-READY, R-INSTALL).

Aspects: each payload image's SDK is installed at /var/lib/metax/maca/<version> from a fake SDK payload image
(the test-image writer, unpacked as the init container does), with the label (newest) and annotation (all),
readiness and probe; a steady round writes nothing; an interrupted copy leaves no visible version and is
cleaned at the next round, and so is a removal killed after it hid the version; a version no longer listed
is removed unless a live container (its runc state dir still there) uses it, and removed once that container
is gone (its record too); a payload without a version tag is refused with an Event; uninstall removes what
it installed, keeps a version in use and says so.
"""

from __future__ import annotations

import pathlib

from metax_core.node import labels, readiness, uninstall
from metax_core.runtime import sdk
from metax_core.wire import event_reasons
from metax_dev import fake_sdk
from metax_hw import hostfiles
from metax_hw_fake import builder
from services.maca import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, Node, make_node


def payloads(n: Node, *wanted: str) -> tuple[str, ...]:
    refs = []
    for i, version in enumerate(wanted):
        archive = fake_sdk.write_payload_image(n.root.parent / "images", version)
        fake_sdk.unpack_payload(archive, n.payload / "maca-payloads" / str(i))
        refs.append(fake_sdk.reference(version))
    return tuple(refs)


def maca(n: Node, images: tuple[str, ...], state_root: pathlib.Path | None = None) -> agent.Maca:
    s = config.Settings(
        node_name=NODE,
        host_root=n.root,
        namespace=NAMESPACE,
        payload_dir=n.payload / "maca-payloads",
        payload_images=images,  # type: ignore[arg-type]
        container_state_root=state_root or n.root,
        probe_file=str(n.root / "probe"),
    )
    return bootstrap.bootstrap(s, ports=n.ports("maca"), clock=n.clock)


def sdk_dir(n: Node) -> pathlib.Path:
    return n.root / sdk.HOST_DIR.lstrip("/")


def use(n: Node, container: str, version: str, *, alive: bool = True) -> None:
    state = f"/run/runc/{container}"
    hostfiles.atomic_write(
        n.root / sdk.IN_USE_DIR.lstrip("/") / f"{container}.json", sdk.render_use(sdk.Use(container, version, state))
    )
    if alive:
        (n.root / state.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (n.root / state.lstrip("/") / "state.json").write_text("{}")


def test_installs_every_listed_version_and_publishes(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    m = maca(n, payloads(n, "2.18.0.3", "2.9.1"))
    m.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.18.0.3", "2.9.1"]
    assert (sdk_dir(n) / "2.18.0.3/bin/maca-version").read_text() == "#!/bin/sh\necho MXMACA 2.18.0.3\n"
    assert n.labels()[labels.GPU_MACA_VERSION] == "2.18.0.3"
    assert n.labels()[labels.MACA_READY] == labels.TRUE  # the readiness label docs/labels.md promises (issue 41)
    assert n.annotations()[labels.MACA_VERSIONS] == "2.18.0.3,2.9.1"
    signal = n.board.read_all()["maca"]
    assert signal.ready and signal.version == "2.18.0.3"
    assert m.probe.present
    assert n.reasons().count(event_reasons.MACA_INSTALLED) == 2
    writes = n.writes()
    n.clock.advance(60)
    m.tick()
    assert n.writes() == writes  # steady: no write


def test_an_interrupted_copy_leaves_no_visible_version(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    images = payloads(n, "2.18.0.3")
    half = sdk_dir(n) / ".2.18.0.3.partial-dead"  # what a copy killed midway leaves
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "maca-version").write_text("#!/bin/sh\necho trunc")
    assert sdk.installed(p.name for p in sdk_dir(n).iterdir()) == []  # the edit service sees nothing
    m = maca(n, images)
    m.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.18.0.3"]
    assert (sdk_dir(n) / "2.18.0.3/bin/maca-version").read_text().endswith("MXMACA 2.18.0.3\n")


def test_a_removal_killed_after_hiding_is_undone_and_decided_again(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    m = maca(n, payloads(n, "2.18.0.3", "2.9.1"))
    m.tick()
    use(n, "c1", "2.9.1")
    m.store.hide(sdk.installed(["2.9.1"])[0])  # the agent was killed right after hiding it
    m2 = maca(n, payloads(n, "2.18.0.3"))
    m2.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.18.0.3", "2.9.1"]  # back, and kept: in use


def test_unlisted_versions_are_kept_while_in_use_then_removed(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    maca(n, payloads(n, "2.18.0.3", "2.9.1", "2.1.0")).tick()
    use(n, "live", "2.9.1")
    use(n, "gone", "2.1.0", alive=False)
    m = maca(n, payloads(n, "2.18.0.3"))
    m.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.18.0.3", "2.9.1"]
    records = n.root / sdk.IN_USE_DIR.lstrip("/")
    assert sorted(p.name for p in records.iterdir()) == ["live.json"]  # the gone container's record is dropped
    assert n.annotations()[labels.MACA_VERSIONS] == "2.18.0.3,2.9.1"
    (n.root / "run/runc/live/state.json").unlink()  # runc delete
    n.clock.advance(60)
    m.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.18.0.3"]
    assert n.annotations()[labels.MACA_VERSIONS] == "2.18.0.3"
    assert event_reasons.MACA_REMOVED in n.reasons()


def test_a_payload_without_a_version_tag_is_refused(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    m = maca(n, ("metax.test/maca:latest",))
    m.tick()
    signal = n.board.read_all()["maca"]
    assert not signal.ready and "does not start with a version" in signal.reason
    assert event_reasons.INVALID_MACA_PAYLOAD in n.reasons()
    assert not m.probe.present
    writes = n.writes()
    n.clock.advance(60)
    m.tick()
    assert n.writes() == writes  # the same problem again: no new Event, no write


def test_uninstall_removes_what_it_installed_and_keeps_what_is_in_use(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(1))
    m = maca(n, payloads(n, "2.18.0.3", "2.9.1"))
    m.tick()
    use(n, "live", "2.9.1")
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request("uid-1"))
    n.clock.advance(60)
    m.tick()
    assert sorted(p.name for p in sdk_dir(n).iterdir()) == ["2.9.1"]
    done = uninstall.answers(n.annotations())["maca"]
    assert done.request == "uid-1" and done.kept == ("MXMACA 2.9.1: used by container(s) live",)
    assert labels.GPU_MACA_VERSION not in n.labels() and labels.MACA_VERSIONS not in n.annotations()
    assert labels.MACA_READY not in n.labels()
    assert "maca" not in n.board.read_all()
    (n.root / "run/runc/live/state.json").unlink()
    n.clock.advance(60)
    m.tick()
    assert not sdk_dir(n).exists()
    assert not (n.root / readiness.READY_DIR).exists() or not any((n.root / readiness.READY_DIR).iterdir())
