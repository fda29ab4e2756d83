"""`metax-operator`: the administrator's command line (`main`), one module per command family."""
