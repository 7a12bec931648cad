"""What every stage and command leans on, and which knows no stage.

Files read and written safely (:mod:`.fileio`), YAML read within bounds (:mod:`.safeyaml`)
and its values checked (:mod:`.schema`), strings from files made safe to show
(:mod:`.escape`), JSON that strict parsers accept (:mod:`.jsonout`), sizes, times and clocks
(:mod:`.units`), how big a graph is analysed (:mod:`.limits`), SIGTERM and SIGHUP handled
like Ctrl-C (:mod:`.signals`). None imports more of devicefit than :mod:`simulator.errors`
and its neighbours here.
"""
