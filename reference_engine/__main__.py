"""``python -m reference_engine [flags]`` = ``render-service engine [flags]``."""

import sys

from .cli import main

sys.exit(main())
