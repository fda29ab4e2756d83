"""The cluster side of the domain: what the operator renders and applies.

`components` (the catalogue and R-DEP), `merge` (pod template precedence, R-MERGE), `workloads` (the objects
for a spec).
"""
