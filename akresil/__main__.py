"""``python -m akresil``: the ``akresil`` command, for environments where the script is not on PATH."""

import sys

from .cli import main

sys.exit(main())
