"""`python -m survivor`: the same command line as the `survivor` console script."""

from survivor.commands.main import main

raise SystemExit(main())
