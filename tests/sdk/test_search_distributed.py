"""The architecture search on fit's PostgreSQL storage (a real server, tests/postgres.py):
the study, its trial decisions and records live in the database, where other machines join
it. fit's distributed machinery (heartbeats, retries, several workers) is tested in
tests/sdk/test_fit_distributed.py; this checks the search uses it. One small search."""

from __future__ import annotations

import numpy as np
import pytest

from devicefit.sdk.fit.search import BUILD, DECISION, RECORD, SearchSettings
from devicefit.sdk.search.train import SearchSpec, search_architectures
from examples.digits import load_digits
from tests.postgres import postgres_server

pytestmark = pytest.mark.slow

STUDY = "search-digits"


def test_a_search_on_postgresql_keeps_its_study_there(tmp_path):
    import optuna

    d = load_digits()
    np.savez(tmp_path / "train.npz", x=d.x_train[:200], y=d.y_train[:200])
    np.savez(tmp_path / "eval.npz", x=d.x_test[:80], y=d.y_test[:80])
    with postgres_server() as server:
        spec = SearchSpec(str(tmp_path / "train.npz"), str(tmp_path / "eval.npz"), epochs=1,
                          search=SearchSettings(max_trials=2, storage=server.url,
                                                study_name=STUDY))
        found = search_architectures("mbv2", {"depth": [(1, 1), (1, 2)], "expansion": [2],
                                              "width": [0.25]},
                                     "stm32l4r5-cortex-m4", tmp_path / "best.tflite", spec)
        study = optuna.load_study(study_name=STUDY,
                                  storage=optuna.storages.RDBStorage(server.url))
        trials = study.get_trials(deepcopy=False)
        built = [t for t in trials if t.user_attrs.get(DECISION, {}).get("as") == BUILD]
        assert found.found and (tmp_path / "best.tflite").is_file()
        assert len(built) == 2 and all(RECORD in t.user_attrs for t in built)
        # Each survivor trained once, in the study every machine reads.
        assert {t.user_attrs[DECISION]["candidate"]["key"] for t in built} == \
            {s.candidate.key for s in found.screen.fitting}
        assert found.settings.distributed
