"""Generated code of the kubelet device plugin API v1beta1 (see ``api.proto``; regenerate with ``regen.sh``)."""
