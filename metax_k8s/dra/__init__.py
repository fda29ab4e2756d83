"""The kubelet's DRA plugin APIs: the generated gRPC code (v1, v1beta1; pluginregistration v1 and drahealth
v1alpha1 beside this package) and `server`, which serves a driver over them."""
