"""Judge: what the report's figures mean, once they are in.

:mod:`.verdict` judges the budgets once per whole report (a registry; a measured figure wins
over the prediction of it); :mod:`.invariants` checks what the static half promises every
later stage and view before anyone reads it (a broken promise is a devicefit bug). Both read
a report the stages built.
"""
