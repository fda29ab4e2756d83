#!/usr/bin/env bash
# Regenerates the checked-in gRPC code of the kubelet DRA APIs (dra v1/v1beta1, pluginregistration v1, drahealth v1alpha1; needs grpcio-tools).
# Pass --check to only verify that the checked-in files are up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" -m metax_k8s.dra.regen "$@"
