"""The ClusterOperator spec: the model (`model`), the one converter (`converter`) and validation (`validation`).

Import the modules, not names: ``from metax_core.spec import model as spec, validation``.
"""
