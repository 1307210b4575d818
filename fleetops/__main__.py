"""`python -m fleetops`, the same as the `fleetops` command."""

from fleetops.cli import main

main()
