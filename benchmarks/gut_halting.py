"""Dynamic-halt paper §7 / Table 5: training runtime of GUT vs "GUT upper bound" vs "GUT no halt".

The measurement is ``rirlab.bench.gut_halt`` (also ``rirlab bench --protocol gut_halt``); this script is its
command line:

    .venv/bin/python benchmarks/gut_halting.py [--bounds 10,20,30,40] [--steps 8] [--hidden-size 32] [--json F]
"""

import sys

from rirlab.bench.gut_halt import main

if __name__ == "__main__":
    sys.exit(main())
