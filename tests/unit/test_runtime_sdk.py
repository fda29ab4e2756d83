"""The SDK's host layout and its GC decision (`metax_core.runtime.sdk`, R-MACA, C6).

Aspects: installed versions are the visible, parseable directory names (hidden copies never count);
the environment is appended after the container's own values and never replaces them; the in-use record
round-trips; the payload images' versions come from their tags (two images with one version, or a tag
without one, are refused naming the image); the plan installs what is missing, removes only what is unlisted
AND unused, keeps what a live container uses (hypothesis over random states).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.runtime import sdk

V = versions.parse


def test_installed_ignores_hidden_and_foreign_names_newest_first() -> None:
    names = ["2.9.1", "2.18.0.3", ".2.20.0.partial-ab12", ".2.1.removing", "lost+found", "2.18.0.10"]
    assert sdk.installed(names) == [V("2.18.0.10"), V("2.18.0.3"), V("2.9.1")]
    assert sdk.leftovers(names) == [".2.1.removing", ".2.20.0.partial-ab12"]


def test_environment_is_appended_never_replaced() -> None:
    env = ["PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/app/lib", "MACA_PATH=/my/maca", "X=1"]
    out = sdk.environment(env, V("2.18.0.3"))
    assert out[0] == "PATH=/usr/bin:/bin:/opt/maca/bin:/opt/maca/mxgpu_llvm/bin"
    assert out[1] == "LD_LIBRARY_PATH=/app/lib:/opt/maca/lib:/opt/maca/mxgpu_llvm/lib"
    assert "MACA_PATH=/my/maca" in out and "MACA_PATH=/opt/maca" not in out
    assert f"{sdk.RESOLVED_ENV}=2.18.0.3" in out and "X=1" in out
    assert sdk.environment(out, V("2.18.0.3")) == out  # applying twice adds nothing


def test_environment_of_a_container_without_path() -> None:
    out = sdk.environment([], V("2.9.1"))
    assert f"PATH={sdk.DEFAULT_PATH}:/opt/maca/bin:/opt/maca/mxgpu_llvm/bin" in out
    assert "LD_LIBRARY_PATH=/opt/maca/lib:/opt/maca/mxgpu_llvm/lib" in out


def test_mount_is_read_only_at_the_fixed_path() -> None:
    m = sdk.mount("/var/lib/metax/maca/", V("2.18.0.3"))
    assert m == {
        "destination": "/opt/maca",
        "type": "bind",
        "source": "/var/lib/metax/maca/2.18.0.3",
        "options": ["rbind", "ro", "nosuid", "nodev"],
    }


def test_use_record_round_trip_and_bad_records() -> None:
    use = sdk.Use("abc123", "2.18.0.3", sdk.state_dir("/run/containerd/runc/k8s.io", "abc123"))
    assert use.state_dir == "/run/containerd/runc/k8s.io/abc123"
    assert sdk.parse_use(sdk.render_use(use)) == use
    assert sdk.state_dir(None, "x") == "/run/runc/x"
    with pytest.raises(InvalidSpec, match="not JSON"):
        sdk.parse_use("{")
    with pytest.raises(InvalidSpec, match="must be an object"):
        sdk.parse_use('{"container": "a"}')
    with pytest.raises(InvalidSpec, match="not a runc container id"):
        sdk.use_file_name("../../etc/passwd")


def test_wanted_versions_come_from_the_tags() -> None:
    images = ["reg.io/maca-c500:2.18.0.3-ubuntu18.04-amd64", "maca-c500:2.9.1"]
    got = sdk.wanted(images, ["/payload/0", "/payload/1"])
    assert [(w.version, w.payload) for w in got] == [(V("2.18.0.3"), "/payload/0"), (V("2.9.1"), "/payload/1")]


def test_wanted_refuses_a_tag_without_version_and_duplicates_naming_the_image() -> None:
    with pytest.raises(InvalidSpec) as caught:
        sdk.wanted(["maca:latest", "a:2.9.1", "b:2.9.1-x"], ["/p/0", "/p/1", "/p/2"])
    messages = [f"{e.path}: {e.message}" for e in caught.value.errors]
    assert messages[0].startswith("METAX_PAYLOAD_IMAGES[0]: tag of 'maca:latest'")
    assert messages[1].startswith("METAX_PAYLOAD_IMAGES[2]: 'b:2.9.1-x' brings 2.9.1")


def test_plan_keeps_in_use_and_removes_the_rest() -> None:
    want = sdk.wanted(["m:2.18.0.3"], ["/p/0"])
    have = [V("2.18.0.3"), V("2.9.1"), V("2.1.0")]
    result = sdk.plan(want, have, [sdk.Use("c1", "2.9.1", "/run/runc/c1")])
    assert result.install == ()
    assert result.remove == (V("2.1.0"),)
    assert result.kept == {V("2.9.1"): ("c1",)}
    assert sdk.plan(sdk.wanted(["m:3.0"], ["/p/0"]), [], []).install[0].version == V("3.0")


_VERSION = st.builds(lambda ns: versions.Version(tuple(ns)), st.lists(st.integers(0, 30), min_size=1, max_size=4))


@given(
    listed=st.sets(_VERSION, max_size=5),
    have=st.sets(_VERSION, max_size=6),
    used=st.sets(_VERSION, max_size=3),
)
def test_plan_property(listed: set[versions.Version], have: set[versions.Version], used: set[versions.Version]) -> None:
    want = [sdk.Wanted(f"m:{v}", v, f"/p/{i}") for i, v in enumerate(sorted(listed))]
    uses = [sdk.Use(f"c{i}", sdk.version_dir(v), f"/run/runc/c{i}") for i, v in enumerate(sorted(used))]
    result = sdk.plan(want, have, uses)
    assert {w.version for w in result.install} == listed - have
    assert set(result.remove) == have - listed - used  # never a listed or used version
    assert set(result.kept) == (have - listed) & used
