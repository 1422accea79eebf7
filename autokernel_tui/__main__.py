import sys

from autokernel_tui.cli import main

sys.exit(main())
