"""Preloaded by the zygote in tests/simulator/run/test_zygote.py: its import time shows whether a
child got it from the zygote (earlier than the child) or imported it itself."""

import os
import threading
import time

LOADED_AT = time.time()
MARK = "initial"
if os.environ.get("ZT_THREAD") == "1":  # a preload that leaves a thread running
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
