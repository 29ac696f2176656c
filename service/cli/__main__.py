"""``python -m service.cli``: the ``calmon`` command."""

import sys

from service.cli import main

sys.exit(main())
