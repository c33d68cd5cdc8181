"""``python -m bench.openb``: see :mod:`bench.openb.run`."""

from bench.openb.run import main

raise SystemExit(main())
