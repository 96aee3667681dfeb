import sys

from labeler.cli import main

sys.exit(main())
