"""``python -m devicefit.simulator.targets.ethos_u._vela_main ARGS``: Vela's command line,
as a module a :mod:`~simulator.run.zygote` can run (Vela's own module has no ``__main__``).

Vela 5 compiles with its C++ core, Regor, which refuses a model it cannot compile by raising
``RuntimeError("Compilation failed: ...")`` out of Vela's ``main`` (a float HARD_SWISH:
"IFM has to be 8bit"). That is a finding about the model, so its message is handed to the
parent on its own (after :data:`~.vela.REFUSED_MARK` on stderr, exit status
:data:`~.vela.REFUSED_EXIT`) instead of in a traceback; whatever else Vela raises (a
configuration it rejects, a bug of its own) keeps its traceback.
"""

import sys

from ethosu.vela.vela import main

from devicefit.simulator.targets.ethos_u.vela import REFUSED_EXIT, REFUSED_MARK, REGOR_REFUSAL

if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        if not str(exc).startswith(REGOR_REFUSAL):
            raise
        sys.stderr.write(f"{REFUSED_MARK}\n{exc}\n")
        sys.exit(REFUSED_EXIT)
