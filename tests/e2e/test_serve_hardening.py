"""serve's defaults: offline for hub ids, no exception text sent to browsers, new flags with help."""
from __future__ import annotations

import os
import subprocess
import sys

from labeler.cli import build_parser


def test_serve_goes_offline_even_after_huggingface_hub_was_imported():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    code = (
        "import huggingface_hub.constants as c, transformers.utils.hub as h\n"
        "before = h.is_offline_mode()\n"
        "from labeler.commands.serve import go_offline\n"
        "go_offline()\n"
        "print(before, c.HF_HUB_OFFLINE, h.is_offline_mode())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr[-2000:]


def test_serve_flags():
    args = build_parser().parse_args(["serve", "--allowed-origin", "https://a.example", "--allowed-origin",
                                      "https://b.example", "--session-days", "1.5"])
    assert (args.allowed_origin, args.session_days, args.allow_hub_downloads) == (
        ["https://a.example", "https://b.example"], 1.5, False)
    defaults = build_parser().parse_args(["serve"])
    assert (defaults.allowed_origin, defaults.session_days) == ([], 7)


def test_unexpected_errors_are_not_sent_to_the_browser():
    from labeler.ui.app import launch_options
    from labeler.ui.context import ServeSettings

    # show_error=True would send str(exception), server paths included, to every user.
    assert launch_options(ServeSettings())["show_error"] is False
