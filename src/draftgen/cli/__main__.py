"""``python -m draftgen.cli.main``: the same as the ``draftgen`` command."""

from draftgen.cli.main import main

raise SystemExit(main())
