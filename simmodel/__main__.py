"""``python -m simmodel``: the command line (see ``simmodel.cli``)."""
import sys

from simmodel.cli import main

if __name__ == "__main__":
    sys.exit(main())
