from nanoslack.cli import main

raise SystemExit(main())
