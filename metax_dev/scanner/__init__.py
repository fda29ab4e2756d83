"""A well-known Kubernetes manifest scanner over the chart and every workload the operator renders (R-SECURITY).

Why this package exists: issue 38 asks that a widely used scanner read what a security team would read — the
chart's objects (``helm template`` with every option that adds objects) and every object the operator renders for
a spec with every component deployed — and that CI fail on anything the scanner finds that a reviewer has not
accepted. The accepted findings are a reviewed file, ``tests/security/scanner-allowlist.yaml``: each names the
check, the object and the container, and says why (000 Table 1.3.1, §1.3.2, the component's doc). A finding the
owner is fixing sits in its ``pending`` section with the issue item that fixes it.

The scanner is Checkov (PyPI, `checkov`), installed into a virtual environment of its own from
``requirements.lock`` and cached under a key of its inputs (:mod:`metax_dev.scanner.checkov`), so the test
environment keeps its own pins. The parts:

* :mod:`~metax_dev.scanner.inputs` — what is scanned: the chart rendered with ``scan-values.yaml`` and the
  operator's render of the ``cluster-operator`` that chart makes;
* :mod:`~metax_dev.scanner.checkov` — the cached install and one run of Checkov;
* :mod:`~metax_dev.scanner.scan` — findings per check, object and container (Checkov stops at a pod's first
  failing container, so each container is scanned on its own too);
* :mod:`~metax_dev.scanner.allowlist` — the reviewed file: what is new, what is stale, and the file regenerated
  for review (``python -m metax_dev.scanner --write``).
"""
