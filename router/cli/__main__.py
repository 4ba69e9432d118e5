"""``python -m router.cli``: the same as the ``switchboard`` command."""

from router.cli import main

main()
