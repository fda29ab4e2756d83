"""A real Prometheus for tests: Debian's ``prometheus`` with its own config (one static job scraping a target
every second with ``honor_labels``, as the rendered ServiceMonitor says), data dir and loopback port."""

from __future__ import annotations

import json
import pathlib
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from typing import Any

JOB = "metax-data-exporter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, workdir: pathlib.Path, target: str) -> None:
        binary = shutil.which("prometheus")
        assert binary is not None, "prometheus missing: Debian package prometheus (./run installs it)"
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
            return json.loads(response.read())

    def ready(self) -> bool:
        assert self.process.poll() is None, "prometheus exited: see prometheus.log"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        finally:
            self.log.close()
