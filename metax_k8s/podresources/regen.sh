#!/usr/bin/env bash
# Regenerates metax_k8s/podresources/v1/api_pb2*.py from api.proto (needs the test extra: grpcio-tools).
# Pass --check to only verify that the checked-in files are up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" -m metax_k8s.podresources.regen "$@"
