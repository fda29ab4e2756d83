"""The environment the chart renders into the operator's pod and the dev tooling sets for an operator process.

Why here: the chart (`metax_dev.chart`, generated), the dev tooling's operator processes and the webhook's server
set these; `services.operator.settings` reads them. Spelled once so a renamed variable cannot leave a writer
behind. The agents' variables are `metax_core.wire.agent_env`'s (``METAX_NAMESPACE`` among them: the operator
reads it too).
"""

from __future__ import annotations

IDENTITY = "METAX_IDENTITY"
"""This replica's name in the Lease and in Events (else ``POD_NAME``, else the host name)."""
POD_NAME = "POD_NAME"
LEADER_ELECTION = "METAX_LEADER_ELECTION"
RESYNC_SECONDS = "METAX_RESYNC_SECONDS"
DRIVER_READY_TIMEOUT = "METAX_DRIVER_READY_TIMEOUT"
WEBHOOK_PORT = "METAX_WEBHOOK_PORT"
"""Set: the operator serves the validating webhook on this port (the webhook's server reads the same variable)."""
