"""Test support shared by several test folders: the test control plane fixtures (a pytest plugin) and the
cluster contract suite's helpers."""
