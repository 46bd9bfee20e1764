from survivor.commands.main import main

raise SystemExit(main())
