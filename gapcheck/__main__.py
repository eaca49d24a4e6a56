import sys

from gapcheck.cli.app import main

sys.exit(main())
