"""``python -m qengine.cli``: the ``qengine`` command without its console script."""

import sys

from qengine.cli.main import main

sys.exit(main())
