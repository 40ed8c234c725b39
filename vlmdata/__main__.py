import sys

from vlmdata.cli.main import main

sys.exit(main())
