from survivor.cli import main

raise SystemExit(main())
