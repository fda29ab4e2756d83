"""The validating admission webhook (R-WEBHOOK): an HTTPS server the operator process starts (`server.serve`)."""
