"""maca (C6, R-MACA): installs the ``maca.payload.images`` MXMACA SDKs on its node, removes the ones no longer
listed and used by no live container, and publishes the installed versions and its readiness."""
