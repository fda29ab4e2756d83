"""Node agents and the operator: one package per component, each `main()` a composition root (no domain logic)."""
