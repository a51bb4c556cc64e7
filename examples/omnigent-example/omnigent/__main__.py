"""Allow `python -m omnigent`."""

from omnigent.cli import main

raise SystemExit(main())
