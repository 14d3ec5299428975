"""Run several `nemo ...` command lines in ONE Python process: NeMo-Run's own CLI application (the object the `nemo`
console script calls, `nemo_run.__main__.app`), called once per command line with its arguments.

Why: each `nemo` process imports all of NeMo, 15-20 s of CPU on the CI machine, and tests/test_nemo_cli.py asks for
about twenty command lines; one import for all of them keeps CI's budget. What differs from separate processes is the
process only: the same application parses the same arguments, resolves the same factories through the same entry
points and prints the same dry run. One command line per test still goes through the real `nemo` executable.

Usage: python tests/_nemo_cli.py JSON_LIST_OF_ARGV_LISTS. Each command line's output is framed by a line
`@@@ begin N` and a line `@@@ end N code=C` (C: what `nemo` would have exited with).
"""

from __future__ import annotations

import json
import sys
import traceback


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    return value if isinstance(value, int) else 1


def main() -> None:
    calls = json.loads(sys.argv[1])
    # NeMo-Run builds its sub-commands (`llm pretrain` and the rest) from the entry-point group named by argv[1] when
    # the application is created, as the `nemo llm ...` console script has it.
    sys.argv = ["nemo", "llm"]
    from nemo_run.__main__ import app

    for index, argv in enumerate(calls):
        print(f"\n@@@ begin {index}", flush=True)
        try:
            # standalone_mode=False: click returns the exit code (typer.Exit) instead of ending the process.
            code = _exit_code(app(args=argv, prog_name="nemo", standalone_mode=False))
        except SystemExit as stop:
            code = _exit_code(stop.code)
        except Exception:  # what `nemo` would print as its traceback, and exit 1 for
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"\n@@@ end {index} code={code}", flush=True)


if __name__ == "__main__":
    main()
