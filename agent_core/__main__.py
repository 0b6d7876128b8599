"""``python -m agent_core``: see :mod:`agent_core.cli`."""

import sys

from agent_core.cli import main

sys.exit(main())
