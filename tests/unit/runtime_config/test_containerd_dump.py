"""What our change did to containerd's effective configuration (metax_core.runtime.containerd_dump, issue 37
item 1): a setting that went or changed is found, with its key; ours is not (the handler, our drop-in in
``imports``, and ``enable_cdi`` only when our drop-in is what turned it on)."""

from __future__ import annotations

from metax_core.runtime import containerd_dump

CRI = "io.containerd.grpc.v1.cri"
BEFORE = f"""version = 2
imports = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]
[plugins."{CRI}"]
  enable_cdi = false
  [plugins."{CRI}".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."{CRI}".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
  [plugins."{CRI}".registry.mirrors."docker.io"]
    endpoint = ["https://mirror.example"]
"""
OURS = ("/etc/containerd/metax/99-metax.toml", "/etc/containerd/config.toml", "/etc/containerd/.scratch.tmp")


def _after(text: str) -> str:
    return text.replace(
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.metax]\n'
        '    runtime_type = "io.containerd.runc.v2"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
    ).replace(
        '"/etc/containerd/config.toml", ', '"/etc/containerd/metax/99-metax.toml", "/etc/containerd/config.toml", '
    )


def test_our_handler_and_our_import_are_not_a_change() -> None:
    assert containerd_dump.differences(BEFORE, _after(BEFORE), ours=OURS) == ()


def test_a_runtime_or_a_mirror_that_went_is_named() -> None:
    lost = _after(BEFORE).replace(
        f'  [plugins."{CRI}".containerd.runtimes.nvidia]\n    runtime_type = "io.containerd.runc.v2"\n', ""
    )
    lost = lost.replace('endpoint = ["https://mirror.example"]', "endpoint = []")
    found = containerd_dump.differences(BEFORE, lost, ours=OURS)
    assert f"plugins.{CRI!r}.containerd.runtimes.nvidia lost" in found
    assert any(f.startswith(f"plugins.{CRI!r}.registry.mirrors.'docker.io'.endpoint changed") for f in found)
    assert "2 more" not in containerd_dump.summary(found)


def test_enable_cdi_turned_on_is_ours_only_when_our_dropin_turned_it_on() -> None:
    after = _after(BEFORE).replace("enable_cdi = false", "enable_cdi = true")
    assert containerd_dump.differences(BEFORE, after, ours=OURS, cdi_added=True) == ()
    assert containerd_dump.differences(BEFORE, after, ours=OURS, cdi_added=False) == (
        f"plugins.{CRI!r}.enable_cdi changed from False to True",
    )


def test_another_import_that_went_is_a_change() -> None:
    after = _after(BEFORE).replace(', "/etc/containerd/conf.d/99-nvidia.toml"', "")
    assert containerd_dump.differences(BEFORE, after, ours=OURS) == (
        "imports changed from ['/etc/containerd/conf.d/99-nvidia.toml'] to []",
    )


def test_a_dump_that_is_not_toml_is_a_difference() -> None:
    assert containerd_dump.differences("{{", BEFORE, ours=OURS) == ("containerd config dump printed no TOML",)
