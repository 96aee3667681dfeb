"""Item 8 of issue 49: the app's own work before the first preview is cut by importing torch and transformers once
in the background when the server starts, not in the first request that needs them."""
from __future__ import annotations

import subprocess
import sys


def test_warm_imports_load_torch_in_a_background_thread_without_blocking():
    code = ("import sys, labeler.ui.app as app\n"
            "assert 'torch' not in sys.modules\n"
            "thread = app.start_warm_imports()\n"
            "assert thread.daemon\n"
            "thread.join(600)\n"
            "assert 'torch' in sys.modules and 'transformers' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr


def test_launch_starts_the_warm_imports():
    import inspect

    from labeler.ui import app

    assert "start_warm_imports()" in inspect.getsource(app.launch)
