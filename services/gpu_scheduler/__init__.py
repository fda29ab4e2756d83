"""gpu-scheduler (C9): the kube-scheduler HTTP extender ranking nodes by GPU topology (docs/scheduler.md)."""
