"""The operator (C1): reconciles the singleton ``cluster-operator`` into every other component.

`settings` (environment), `bootstrap` (adapters), `workqueue` (coalescing, back-off), `informers` (watches and
their caches), `states` (one state per component), `applier` (server-side apply, prune), `rollout_driver`
(R-ROLLOUT for real), `uninstall_wait` and `cleanup` (the finalizer: the nodes undo first, then everything
goes), `reconciler` (one reconcile), `leader` (Lease), `run` (the process: `metax-operator-controller`,
`metax-operator run`). docs/operator.md explains the whole.
"""
