"""The manifest scanner's tools for tests/security (docs/security.md "The manifest scanner").

Checkov is installed into a cached environment of its own (`metax_dev.scanner.checkov.install`, about 40 s cold,
nothing after) and helm comes from the control plane's cached build (`metax_dev.controlplane.build`): both right
after collection when a selected test uses ``scanner`` or ``scan_result``, outside any test's timeout, as
tests/containerruntime/conftest.py does for CRI-O. The terminal summary says what getting the scanner cost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metax_dev.controlplane import build, errors
from metax_dev.scanner import checkov, inputs, scan

_tools: tuple[checkov.Installed, Path] | Exception | None = None


def _needs_scanner(item: pytest.Item) -> bool:
    return bool({"scanner", "scan_result"} & set(getattr(item, "fixturenames", ())))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install (or find) the scanner and build (or find) helm before the first test, when a selected test scans."""
    global _tools
    if session.config.option.collectonly or not any(_needs_scanner(i) for i in session.items):
        return
    try:
        _tools = (checkov.install(), build.build().binary("helm"))
    except (checkov.ScannerError, errors.ControlPlaneError) as exc:
        _tools = exc


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if isinstance(_tools, tuple):
        installed = _tools[0]
        how = "reused cached" if installed.cached else "installed"
        what = f"{checkov.PACKAGE} {installed.version} in {installed.seconds:.1f}s"
        terminalreporter.write_line(f"manifest scanner: {how} {what} ({installed.venv})")


def _available() -> tuple[checkov.Installed, Path]:
    if not isinstance(_tools, tuple):
        pytest.fail(f"the manifest scanner is unavailable: {_tools}", pytrace=False)
    return _tools


@pytest.fixture(scope="session")
def scanner() -> checkov.Installed:
    return _available()[0]


@pytest.fixture(scope="session")
def scan_result() -> scan.ScanResult:
    """One scan of the chart and the operator's objects for the whole session."""
    installed, helm = _available()
    return scan.scan(installed, inputs.manifests(helm))
