"""``python -m devicefit.simulator.targets.ethos_u._vela_main ARGS``: Vela's command line,
as a module a :mod:`~simulator.run.zygote` can run (Vela's own module has no ``__main__``).

Vela 5 compiles with its C++ core, Regor, which refuses a model it cannot compile by raising
``RuntimeError("Compilation failed: ...")`` out of Vela's ``main`` (a float HARD_SWISH:
"IFM has to be 8bit"). That is a finding about the model, so its message is handed to the
parent on its own (after :data:`~.vela.REFUSED_MARK` on stderr, exit status
:data:`~.vela.REFUSED_EXIT`) instead of in a traceback; whatever else Vela raises (a
configuration it rejects, a bug of its own) keeps its traceback.

With ``--enable-debug-db`` Vela writes its operator database (which operator of the input
model each of its scheduled operators came from, and the command stream that runs it) as
XML whose CSV rows quote tensor names without escaping them: a name holding a quote, a
newline or ``]]>`` makes that file ambiguous. So its writer is replaced by one that writes
the same tables as JSON (:data:`~.vela.DATABASE_SUFFIX`), exact whatever the names.
"""

import json
import sys
from typing import Any

from ethosu.vela import stats_writer
from ethosu.vela.vela import main

from devicefit.simulator.targets.ethos_u.vela import (
    DATABASE_SUFFIX,
    DATABASE_TABLES,
    REFUSED_EXIT,
    REFUSED_MARK,
    REGOR_REFUSAL,
)


def write_database(opt_database: Any, output_basename: str) -> None:
    """Vela's ``write_regor_db``, in JSON: each table as its header and rows of text."""
    tables = {name: {"header": list(table.header), "data": [list(row) for row in table.data]}
              for name, table in opt_database.tables.items() if name in DATABASE_TABLES}
    with open(output_basename + DATABASE_SUFFIX, "w", encoding="utf-8") as out:
        json.dump(tables, out)


if __name__ == "__main__":
    # Vela's process_regor calls it through the module: replacing the attribute is enough.
    stats_writer.write_regor_db = write_database
    try:
        sys.exit(main())
    except RuntimeError as exc:
        if not str(exc).startswith(REGOR_REFUSAL):
            raise
        sys.stderr.write(f"{REFUSED_MARK}\n{exc}\n")
        sys.exit(REFUSED_EXIT)
