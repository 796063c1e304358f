"""``python -m streams.cli ARGS``: the same as ``ttsflow ARGS`` (tests and the process supervisor spawn it)."""

import sys

from streams.cli import main

sys.exit(main())
