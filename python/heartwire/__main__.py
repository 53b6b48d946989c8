import sys

from heartwire.cli import main

sys.exit(main())
