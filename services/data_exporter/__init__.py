"""data-exporter (C8, R-EXPORTER): Prometheus metrics of the node's GPUs, with the pods holding them.

`agent` samples the GPUs (one mx-smi run through the hardware port) and the kubelet's PodResources in the
background every ``sample_interval``; `collector` renders the latest sample on each scrape of ``/metrics``
(`metax_core.metrics.exposition`), so a scrape never waits on the hardware. It has no API access at all.
"""
