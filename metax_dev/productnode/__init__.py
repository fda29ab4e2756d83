"""The product on a real node: the chart installed with the real ``helm`` from the product's images on a real
node (`metax_dev.realnode`) over its own fake MetaX host (`helm_release`), and the two agents that restart the
node's container runtime run as host processes beside it (`runtime_agent`). Shared by the end-to-end test, the
real-node demo (``metax-dev demo --cluster real --real-node``) and the benchmarks."""
