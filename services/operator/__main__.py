"""`python -m services.operator`: the same as `metax-operator-controller`."""

import sys

from services.operator.main import main

sys.exit(main())
