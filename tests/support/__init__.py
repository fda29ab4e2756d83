"""Test support shared by several test folders: the test control plane's fixtures (a pytest plugin,
`control_plane`), the cluster contract suite's helpers (`cluster`) and the chart's helm helpers (`chart`), each
imported by one name (``tests.support.…``) wherever it is used."""
