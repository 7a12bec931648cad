"""``python -m devicefit.simulator.targets.ethos_u._vela_main ARGS``: Vela's command line,
as a module a :mod:`~simulator.zygote` can run (Vela's own module has no ``__main__``)."""

import sys

from ethosu.vela.vela import main

if __name__ == "__main__":
    sys.exit(main())
