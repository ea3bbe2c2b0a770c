"""One module per command: NAME, HELP, add_arguments(parser), run(args, project) -> Outcome
(the CLI turns it into the exit code)."""

from builder.commands import (
    all_cmd,
    apply_cmd,
    build_cmd,
    bump_cmd,
    check_cmd,
    export_cmd,
    fetch_cmd,
    gc_cmd,
    pin_cmd,
    rebase_cmd,
    refresh_cmd,
    slice_cmd,
    status_cmd,
    test_cmd,
    verify_cmd,
    wheel_cmd,
)

COMMANDS = [
    fetch_cmd, apply_cmd, refresh_cmd, status_cmd, rebase_cmd, check_cmd, build_cmd, test_cmd, slice_cmd, verify_cmd,
    all_cmd, pin_cmd, export_cmd, wheel_cmd, gc_cmd, bump_cmd,
]
