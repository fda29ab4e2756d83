"""The CNI plugin of a real test node: a veth pair per pod with a routed address of the node's /24.

Why this module exists: the CRI plugin of containerd refuses to run a pod sandbox without a CNI
network, and the product's pods need a real one (`metax_dev.realnode.podnet`: the API server dials the
operator's webhook at its pod IP, pods dial the ``kubernetes`` Service). So ADD brings ``lo`` up in the
pod's network namespace, creates a veth pair (``eth0`` in the pod, ``<node prefix><hash>`` on the host),
gives ``eth0`` a /32 of the node's range with a default route through the gateway address, which the host
end carries (so the host answers ARP for it), and routes the /32 to the host end; the host end gets
``route_localnet`` (the node's Service chain translates the ``kubernetes`` ClusterIP to the API server on
127.0.0.1). DEL removes the host end (the pod's end goes with it). Addresses are leased in files under the
node's directory. Everything the plugin creates is a property of the veth, and goes with it.

containerd's CRI plugin also asks for a ``loopback`` plugin (its own loopback network); the same code
answers under that name. containerd runs the plugin as ``<cni bin dir>/metax-loopback`` (a two-line wrapper written by
:func:`install`) which execs ``python -m metax_dev.realnode.cni``; imports stay light on purpose.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

PLUGIN: Final = "metax-loopback"
#: containerd's CRI also sets up a loopback network with a plugin of this name; this module is it.
LOOPBACK_PLUGIN: Final = "loopback"
NETWORK: Final = "metax-test"
_VERSIONS: Final = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def install(bin_dir: Path, conf_dir: Path, data_dir: Path, subnet: str, gateway: str, veth_prefix: str) -> None:
    """Write the plugin wrapper and the network config containerd reads."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    conf_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    source_root = Path(__file__).resolve().parents[2]
    for name in (PLUGIN, LOOPBACK_PLUGIN):
        wrapper = bin_dir / name
        wrapper.write_text(
            "#!/bin/sh\n"
            f"PYTHONPATH={shlex.quote(str(source_root))} exec {shlex.quote(sys.executable)} "
            "-m metax_dev.realnode.cni\n"
        )
        wrapper.chmod(0o755)
    tools = {name: shutil.which(name) or f"/usr/bin/{name}" for name in ("nsenter", "ip")}
    config = {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": PLUGIN,
                "subnet": subnet,
                "gateway": gateway,
                "vethPrefix": veth_prefix,
                "dataDir": str(data_dir),
                **tools,
            },
        ],
    }
    (conf_dir / "10-metax-test.conflist").write_text(json.dumps(config, indent=2) + "\n")


def _lease(data_dir: Path, subnet: str, container: str) -> str:
    network = ipaddress.ip_network(subnet)
    with (data_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken = {p.name: p.read_text().strip() for p in data_dir.iterdir() if p.name[0].isdigit()}
        for address, owner in taken.items():
            if owner == container:
                return address
        for host in list(network.hosts())[1:]:  # .1 is the gateway
            if str(host) not in taken:
                (data_dir / str(host)).write_text(container + "\n")
                return str(host)
    raise RuntimeError(f"no free address left in {subnet}")


def _release(data_dir: Path, container: str) -> None:
    if not data_dir.is_dir():
        return
    with (data_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for lease in data_dir.iterdir():
            if lease.name[0].isdigit() and lease.read_text().strip() == container:
                lease.unlink()


def host_veth(prefix: str, container: str) -> str:
    """The host end's name: the node's prefix and a hash of the sandbox id (at most 15 characters)."""
    return prefix + hashlib.sha256(container.encode()).hexdigest()[: 15 - len(prefix)]


def _plumb(conf: dict[str, Any], netns: str, ifname: str, host_end: str, address: str, gateway: str) -> None:
    ip, nsenter = conf.get("ip", "ip"), conf.get("nsenter", "nsenter")
    in_pod = [nsenter, f"--net={netns}", ip]

    def run(*command: str) -> None:
        subprocess.run(list(command), check=True, capture_output=True)

    exists = subprocess.run([ip, "link", "show", host_end], check=False, capture_output=True).returncode == 0
    if not exists:  # ADD again for the same sandbox: already plumbed
        run(ip, "link", "add", host_end, "type", "veth", "peer", "name", ifname, "netns", netns)
        Path(f"/proc/sys/net/ipv4/conf/{host_end}/route_localnet").write_text("1\n")
        run(ip, "addr", "add", f"{gateway}/32", "dev", host_end)
        run(ip, "link", "set", host_end, "up")
        run(*in_pod, "addr", "add", f"{address}/32", "dev", ifname)
        run(*in_pod, "link", "set", ifname, "up")
        run(*in_pod, "route", "add", gateway, "dev", ifname, "scope", "link")
        run(*in_pod, "route", "add", "default", "via", gateway, "dev", ifname)
        run(ip, "route", "add", f"{address}/32", "dev", host_end, "scope", "link")


def handle(command: str, env: dict[str, str], conf: dict[str, Any]) -> dict[str, Any] | None:
    """One CNI call; the result to print (``None``: print nothing)."""
    version = str(conf.get("cniVersion", "1.0.0"))
    data_dir = Path(conf["dataDir"]) if "dataDir" in conf else None
    if command == "VERSION":
        return {"cniVersion": version, "supportedVersions": _VERSIONS}
    if command == "ADD":
        netns = env["CNI_NETNS"]
        subprocess.run(
            [conf.get("nsenter", "nsenter"), f"--net={netns}", conf.get("ip", "ip"), "link", "set", "lo", "up"],
            check=True,
            capture_output=True,
        )
        if conf.get("type") == LOOPBACK_PLUGIN:  # containerd's own loopback network
            return {
                "cniVersion": version,
                "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": netns}],
                "ips": [{"address": "127.0.0.1/8", "interface": 0}],
                "dns": {},
            }
        assert data_dir is not None
        subnet, gateway = str(conf["subnet"]), str(conf["gateway"])
        container = env["CNI_CONTAINERID"]
        address = _lease(data_dir, subnet, container)
        host_end = host_veth(str(conf["vethPrefix"]), container)
        _plumb(conf, netns, env.get("CNI_IFNAME", "eth0"), host_end, address, gateway)
        return {
            "cniVersion": version,
            "interfaces": [
                {"name": host_end},
                {"name": env.get("CNI_IFNAME", "eth0"), "sandbox": netns},
            ],
            "ips": [{"address": f"{address}/32", "gateway": gateway, "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": gateway}],
            "dns": {},
        }
    if command == "DEL":
        if data_dir is not None:
            container = env.get("CNI_CONTAINERID", "")
            if "vethPrefix" in conf and container:
                ip = conf.get("ip", "ip")
                host_end = host_veth(str(conf["vethPrefix"]), container)
                subprocess.run([ip, "link", "del", host_end], check=False, capture_output=True)
            _release(data_dir, container)
        return None
    if command in ("CHECK", "STATUS", "GC"):
        return None
    raise ValueError(f"unsupported CNI_COMMAND {command!r}")


def main() -> int:
    env = dict(os.environ)
    command = env.get("CNI_COMMAND", "")
    try:
        raw = sys.stdin.read() if command != "VERSION" else (sys.stdin.read() or "{}")
        conf = json.loads(raw or "{}")
        result = handle(command, env, conf)
    except Exception as exc:  # the CNI contract: an error object on stdout, exit code 1
        detail = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) else ""
        print(json.dumps({"cniVersion": "1.0.0", "code": 999, "msg": f"{PLUGIN}: {exc} {detail}".strip()}))
        return 1
    if result is not None:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
