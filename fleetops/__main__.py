"""`python -m fleetops` and the `fleetops` command (pyproject's console script names `main`)."""

from fleetops import memory


def main() -> None:
    # The collector off before the CLI's modules are imported, not only once they are (`cli.main`):
    # building pydantic's and typer's objects, it collected 66 times (4-8 ms of `validate`'s CPU).
    memory.for_a_command()
    from fleetops import cli

    cli.main()


if __name__ == "__main__":
    main()
