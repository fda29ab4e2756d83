"""The operator as a local process against a real API server, from its composition root (``python -m
services.operator``), as a controller runs in envtest.

Why a module of its own: the integration tests (tests/integration/operator) and the real-cluster demo
(`metax_dev.demo.realfleet`) both run the operator this way: its own ``__main__`` with an admin kubeconfig and
the settings the chart's environment would give it, its output in a log file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from metax_core.wire import agent_env, operator_env


class OperatorProcess:
    def __init__(
        self, kubeconfig: Path, identity: str, log_dir: Path, env: Mapping[str, str] | None = None, *, namespace: str
    ) -> None:
        self.identity = identity
        self.log_path = log_dir / f"operator-{identity}.log"
        environment = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            operator_env.IDENTITY: identity,
            agent_env.NAMESPACE: namespace,
            **(env or {}),
        }
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.operator"], env=environment, stdout=self._log, stderr=subprocess.STDOUT
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]
