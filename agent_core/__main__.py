"""``python -m agent_core``: see :mod:`agent_core.terminal.cli`."""

import sys

from agent_core.terminal.cli import main

sys.exit(main())
