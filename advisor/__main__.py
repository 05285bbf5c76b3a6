"""``python -m advisor``: the command line. Ctrl-C or SIGTERM while Python is still importing the engines (a second
or two) ends the run with one line, as it does later; nothing has been written by then."""

import signal
import sys


def _before_main(signum, frame):
    name = "terminated" if signum == signal.SIGTERM else "interrupted"
    sys.stderr.write(f"error: {name}: stopped while starting; nothing was written\n")
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _before_main)
signal.signal(signal.SIGINT, _before_main)
from advisor.cli import main  # noqa: E402 - after the handlers: importing takes a second or two

signal.signal(signal.SIGINT, signal.default_int_handler)  # main() turns Ctrl-C into its own one-line stop
sys.exit(main())
