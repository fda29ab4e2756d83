"""gpu-device over the real kubelet device plugin protocol: a test kubelet, fakes, and the tests."""
