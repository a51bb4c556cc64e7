"""One-line logging to stdout or stderr, coloured when asked to."""

import os
import signal
import sys
import time

_stream = sys.stdout


def use_stderr(enabled: bool) -> None:
    """Send log lines to stderr instead of stdout (`--log-to-stderr`)."""
    global _stream
    _stream = sys.stderr if enabled else sys.stdout


def log(component: str, message: str) -> None:
    """Print `omnigent-<component>: <message>` and flush at once."""
    label = f"omnigent-{component}:"
    if os.environ.get("OMNIGENT_LOG_FORCE_COLOR") == "1":
        label = f"\x1b[32m{label}\x1b[0m"
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} {label} {message}", file=_stream, flush=True)


class Stop(Exception):
    """Raised in the main thread by the SIGTERM handler."""


def exit_on_sigterm() -> None:
    """Turn SIGTERM into a `Stop` exception so `finally` blocks run."""

    def handler(signum, frame):
        # A process-group SIGTERM reaches both `uv run` (which forwards it)
        # and us: only the first one stops the program, the rest are ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Stop()

    signal.signal(signal.SIGTERM, handler)
