"""Generated code of the kubelet PodResources API v1 (see ``api.proto``; regenerate with ``../regen.sh``)."""
