"""GPU topology on one node: the document topo-worker publishes (`document`) and the one placement decision
(`placement.best_set`) that the published scores, the gpu-scheduler extender and gpu-device's
GetPreferredAllocation all call, so the set the scheduler counted on is the set the node hands out.
"""
