"""The command line: ``python -m advisor <command> ...`` over the same engine as the dashboard.

``parser`` builds the options (their checks in ``arguments``), ``commands`` compute a result, ``output`` prints
it; ``main`` runs the three and turns a refusal into one message and exit code 2.
"""

from __future__ import annotations

import sys

from advisor.cli.commands import CommandFailed, run
from advisor.cli.output import error, show
from advisor.cli.parser import COMMANDS, build_parser
from advisor.processes import Terminated, sigterm_as_interrupt

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in COMMANDS else ""  # only its options are built (parser.py says why)
    try:
        with sigterm_as_interrupt():  # SIGTERM cleans up as Ctrl-C does: staging removed, workers killed
            args = build_parser(command).parse_args(argv)  # inside: building the parser imports a little
            show(args, run(args))  # inside the try: `advisor ... --json | head` closes the pipe during the print too
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: what was being written is gone; one line, no traceback
        error(f"{'terminated' if isinstance(e, Terminated) else 'interrupted'}: stopped; nothing was left half-written")
        return e.exit_code if isinstance(e, Terminated) else 130
    except BrokenPipeError:  # `advisor ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0
    except CommandFailed as e:  # the trial's parity check: its own exit code
        error(str(e))
        return e.code
    except ValueError as e:  # InputError and PlanError too: a bad input or setting, one message, no traceback
        error(str(e))
        return 2
    return 0
