"""``python -m tensorverbs`` runs the ``tensorverbs`` command."""
import sys

from .cli import main

sys.exit(main())
