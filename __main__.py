"""``python -m fleetgym`` is the ``fleetgym`` command."""

from fleetgym.cli import main

raise SystemExit(main())
