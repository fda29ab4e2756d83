"""gpu-device's lifecycle against kubelet:

- kubelet restarts (its sockets wiped, a new kubelet.sock): the plugin serves again and re-registers,
  also when only kubelet.sock is new;
- kubelet down for a while: the plugin registers as soon as it is back;
- the plugin's own gRPC server dies or its socket disappears: it is restarted and re-registered;
- stop (SIGTERM): streams end, sockets and the CDI spec are removed;
- the pod's readinessProbe file exists exactly while the offered resources are registered with the kubelet;
- R-READY: nothing is registered until every required component says ready; a component that stops
  being ready turns every device Unhealthy, and its recovery makes them Healthy again;
- SIGTERM delivered to the process stops `run_until_signalled` cleanly.
"""

from __future__ import annotations

import os
import signal
import threading

from metax_core.node import devices
from metax_dev.devicekubelet import Kubelet
from services.gpu_device import __main__ as entry

from .conftest import Node

GPU = "metax-tech.com/gpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}


def test_reregisters_after_kubelet_restart(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    old = node.kubelet

    new = node.restart_kubelet()

    assert not old.connected(GPU), "the old kubelet's stream should have ended"
    new.wait_for(lambda: new.healthy(GPU) == ALL, what="re-registration with the new kubelet")
    assert new.registered(GPU) == 1
    assert (node.plugin_dir / "metax-gpu.sock").is_socket()
    assert len(new.allocate(GPU, ["0000:09:00.0"]).container_responses) == 1


def test_reregisters_on_a_new_kubelet_socket_even_if_its_own_socket_survived(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    old = node.kubelet

    new = node.restart_kubelet(wipe_sockets=False)

    new.wait_for(lambda: new.healthy(GPU) == ALL, what="re-registration on the new kubelet.sock alone")
    assert new.registered(GPU) == 1 and not old.connected(GPU)


def test_registers_when_kubelet_comes_back(node: Node) -> None:
    node.kubelet.stop()
    agent = node.start()
    node.kubelet.wait_for(lambda: agent.decision.may_advertise)  # the loop runs, without a kubelet
    node.kubelet = Kubelet(node.plugin_dir).start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="registration once kubelet is up")


def test_the_readiness_probe_file_means_registered_with_the_kubelet(node: Node) -> None:
    probe_file = node.root / "ready"
    node.kubelet.stop()
    agent = node.start(probe_file=str(probe_file))
    node.kubelet.wait_for(lambda: agent.decision.may_advertise)  # ready to advertise, but no kubelet to tell
    assert not probe_file.exists()
    node.kubelet = Kubelet(node.plugin_dir).start()
    node.kubelet.wait_for(probe_file.exists, what="the probe file once registered")
    assert node.kubelet.registered(GPU) == 1
    assert probe_file.read_text() == f"registered with the kubelet: {GPU}\n"
    node.stop_agent()
    assert not probe_file.exists()


def test_restarts_its_own_server_when_it_dies(node: Node) -> None:
    agent = node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    agent.plugins[devices.Resource.GPU].stop()  # the server dies under the agent
    node.kubelet.wait_for(lambda: node.kubelet.registered(GPU) == 2, what="re-registration")
    node.kubelet.wait_for(lambda: node.kubelet.connected(GPU) and node.kubelet.healthy(GPU) == ALL)


def test_restarts_when_its_socket_disappears(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    (node.plugin_dir / "metax-gpu.sock").unlink()
    node.kubelet.wait_for(lambda: node.kubelet.registered(GPU) == 2, what="re-registration")
    node.kubelet.wait_for((node.plugin_dir / "metax-gpu.sock").is_socket)
    assert len(node.kubelet.allocate(GPU, ["0000:09:00.0"]).container_responses) == 1


def test_stop_ends_streams_and_removes_sockets_and_cdi_spec(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    assert node.cdi_path.exists()

    node.stop_agent()

    node.kubelet.wait_for(lambda: not node.kubelet.connected(GPU), what="the stream to end")
    assert not (node.plugin_dir / "metax-gpu.sock").exists()
    assert not node.cdi_path.exists()
    assert (node.plugin_dir / "kubelet.sock").is_socket(), "kubelet's socket is not ours to remove"


def test_advertises_nothing_until_required_components_are_ready(node: Node) -> None:
    node.set_ready("maca", False, "installing MXMACA 2.18")
    node.board.withdraw("driver")
    agent = node.start()
    node.kubelet.wait_for(lambda: "no readiness signal from driver" in agent.decision.reason)
    assert node.kubelet.registrations == []
    assert not (node.plugin_dir / "metax-gpu.sock").exists()

    node.set_ready("driver")
    node.kubelet.wait_for(lambda: agent.decision.reason == "maca not ready: installing MXMACA 2.18")
    assert node.kubelet.registrations == []

    node.set_ready("maca")
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="advertising once ready")


def test_component_losing_readiness_makes_every_device_unhealthy(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    node.set_ready("container-runtime", False, "containerd config being rewritten")
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == ALL, what="all unhealthy")

    node.set_ready("container-runtime")
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="recovery")


def test_sigterm_stops_the_loop_cleanly(node: Node) -> None:
    agent = node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    node.stop_agent()  # the fixture's thread; now run the same agent the way main() does, in this thread
    before = signal.getsignal(signal.SIGTERM)

    def terminate_once_registered_again() -> None:
        node.kubelet.wait_for(lambda: node.kubelet.registered(GPU) == 2 and node.kubelet.healthy(GPU) == ALL)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_once_registered_again)
    killer.start()
    entry.run_until_signalled(agent)
    killer.join()

    node.kubelet.wait_for(lambda: not node.kubelet.connected(GPU), what="the stream to end")
    assert not (node.plugin_dir / "metax-gpu.sock").exists()
    assert signal.getsignal(signal.SIGTERM) is before, "the previous SIGTERM handler is restored"
