import sys

from gnnsys.cli import main

sys.exit(main())
