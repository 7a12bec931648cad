"""Signals at random moments in ``fit``, ``fit --jobs 2`` and ``search``, many inside a trial.

Each command runs in a session of its own with its study in a SQLite file (``--storage``),
as a CI runner or a terminal starts it. A reference run measures how long it takes; each
trial sends SIGINT, SIGTERM or SIGHUP at a random moment in [0.5 s, 0.95 × that time] to
the command's process or to its whole process group (a run that ends before its signal
shortens that time to its own: a reference run on a loaded machine must not send most
signals after the end), and checks:

- **traceback**: ``Traceback`` on stderr; **optuna**: an optuna log line (``[W …]``);
- **status**: anything but 128 + the signal (a command that ended before the signal was
  sent is counted apart, and so is one whose work was done when it came: the study holds
  ``--max-trials`` judged candidates and the output is written, the CLI ignores a signal
  while the interpreter shuts down);
- **line**: the last line of stderr is not the one ``devicefit: interrupted …`` /
  ``devicefit: stopped by SIG… …`` line, or there are more than one;
- **inside a trial**: the study holds a trial marked interrupted by this run (else the
  signal came while the command started, between trials or after the search);
- **kept**: where the command kept a candidate (``-o`` written), it runs in the runtime:
  ``devicefit simulate OUT --profile P --run`` exits 0;
- **resume**: the first ``--resumes`` runs per command whose signal came inside a trial
  are run again to the end on the same study, which must then hold exactly ``--max-trials``
  judged candidates;
- **leaked**: a process of the session or a zygote still alive 10 s after the command;
- **partial**: a temporary file left in the output folder or in ``$TMPDIR`` (but for the
  ``__pycache__`` folder TensorFlow's autograph leaves there in any run that trains,
  signalled or not: counted apart).

    .venv/bin/python benchmarks/bench_trial_signals.py [--runs 3] [--resumes 1] [--seed 0]
        [--commands fit,fit-jobs2,search] [--json out.json]

The default is a short run (3 runs per command); the figures in docs/benchmarks.md come
from ``--runs 15 --resumes 1``. The model is examples/digits.py's CNN (trained once and
cached under tests/artifacts/convert), the data scikit-learn's digits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_signals import (  # noqa: E402 — needs ROOT on the path
    DEVICEFIT,
    SIGNALS,
    reap,
)

STUDY = "bench"
HANG_S = 120.0


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    profile: Path
    max_trials: int


@dataclass
class Tally:
    runs: int = 0
    autograph_cache: int = 0
    ended_before_signal: int = 0
    after_the_work: int = 0
    inside_trial: int = 0
    kept_checked: int = 0
    resumes: int = 0
    defects: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, what: str, stderr: str = "") -> None:
        self.defects.setdefault(kind, []).append(what + (f"\n{stderr[-3000:]}" if stderr else ""))


def commands(work: Path, names: set[str]) -> list[Command]:
    """The commands on digits, each against a profile that plain int8 misses."""
    import numpy as np

    from examples.digits import cached_cnn, load_digits

    inp = work / "in"
    inp.mkdir(parents=True, exist_ok=True)
    digits = load_digits()
    data = digits.save_npz(inp)
    np.savez(inp / "small_train.npz", x=digits.x_train[:300], y=digits.y_train[:300])
    np.savez(inp / "small_eval.npz", x=digits.x_test[:120], y=digits.y_test[:120])
    fit_profile = inp / "tight-l4.yaml"
    fit_profile.write_text("name: tight-l4\nextends: stm32l4r5-cortex-m4\n"
                           "budgets:\n  flash: 132KiB\n  arena: 4500B\n")
    search_profile = inp / "tight-digits.yaml"
    search_profile.write_text("name: tight-digits\nextends: stm32l4r5-cortex-m4\nbudgets:\n"
                              "  flash: 160KiB\n  arena: 12KiB\n  latency: 20ms\n")
    model = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
    fit = ("fit", str(model), "--profile", str(fit_profile), "--train", str(data["train"]),
           "--eval", str(data["test"]), "--epochs", "1", "-o", "{out}/fit.tflite")
    search = ("search", "--family", "mbv2", "--profile", str(search_profile),
              "--param", "width=0.25,2", "--param", "depth=1-1,1-2-2", "--param",
              "expansion=2", "--train", str(inp / "small_train.npz"), "--eval",
              str(inp / "small_eval.npz"), "--epochs", "1", "-o", "{out}/search.tflite")
    every = [Command("fit", (*fit, "--max-trials", "3"), fit_profile, 3),
             Command("fit-jobs2", (*fit, "--max-trials", "4", "--jobs", "2"), fit_profile, 4),
             Command("search", (*search, "--max-trials", "2"), search_profile, 2)]
    return [c for c in every if c.name in names]


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(work / "tmp"),
            "TF_CPP_MIN_LOG_LEVEL": "3"}


def _argv(cmd: Command, work: Path) -> list[str]:
    storage = f"sqlite:///{work / 'state' / 'study.db'}"
    return [*DEVICEFIT, *(a.replace("{out}", str(work / "out")) for a in cmd.argv),
            "--storage", storage, "--study", STUDY]


def _fresh(work: Path) -> None:
    for name in ("out", "state", "tmp"):
        shutil.rmtree(work / name, ignore_errors=True)
        (work / name).mkdir()


def _trials(work: Path) -> list[Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    db = work / "state" / "study.db"
    if not db.exists():
        return []
    try:
        return optuna.load_study(study_name=STUDY,
                                 storage=f"sqlite:///{db}").get_trials(deepcopy=False)
    except KeyError:  # the signal came before the study was created
        return []


def _judged(work: Path) -> int:
    from devicefit.sdk.study import RECORD

    return sum(1 for t in _trials(work) if RECORD in t.user_attrs
               and t.user_attrs[RECORD]["stage"] != "skipped")


@dataclass(frozen=True)
class Ran:
    status: int | None
    stderr: str
    seconds: float
    #: The signal was sent before the command ended.
    sent: bool
    left: list[str]


def _run(cmd: Command, work: Path, sig: int | None, delay: float, group: bool) -> Ran:
    start = time.monotonic()
    proc = subprocess.Popen(_argv(cmd, work), cwd=work / "in", env=_env(work),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    sent = False
    if sig is not None:
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            (os.killpg if group else os.kill)(proc.pid, sig)
            sent = True
    try:
        _, err = proc.communicate(timeout=HANG_S if sig is not None else 1800)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        code, err = None, b""
    seconds = time.monotonic() - start
    return Ran(code, err.decode(errors="replace"), seconds, sent, reap(proc.pid, work))


def _said(sig: int) -> str:
    if sig == signal.SIGINT:
        return "devicefit: interrupted"
    return f"devicefit: stopped by {signal.Signals(sig).name}"


def trial(cmd: Command, work: Path, rng: random.Random, duration: float, resumes: int,
          tally: Tally) -> float:
    """One signalled run; returns how long a run takes, as far as this one shows."""
    from devicefit.sdk.study import INTERRUPTED

    sig = rng.choice(SIGNALS)
    group = rng.random() < 0.5
    delay = rng.uniform(0.5, 0.95 * duration)
    label = (f"{cmd.name} {signal.Signals(sig).name} to {'group' if group else 'process'} "
             f"at {delay:.1f} s")
    _fresh(work)
    ran = _run(cmd, work, sig, delay, group)
    code, err = ran.status, ran.stderr
    tally.runs += 1
    last = err.strip().splitlines()[-1] if err.strip() else ""
    print(f"  {label}: status {code}: {last[:150] if ran.sent else 'ended before the signal'}",
          flush=True)
    if not ran.sent:
        tally.ended_before_signal += 1
        return min(duration, ran.seconds)
    if code is None:
        tally.add("hang", label)
        return duration
    if code in (0, 1) and _judged(work) == cmd.max_trials and "Traceback" not in err and \
            (code == 1 or any((work / "out").glob("*.tflite"))):
        tally.after_the_work += 1
        return duration
    if ran.left:
        tally.add("leaked", f"{label}: {ran.left[:3]}")
    if "Traceback" in err:
        tally.add("traceback", f"{label}: {err.strip().splitlines()[-1][:160]}", err)
    if "[W " in err or "[I " in err:
        tally.add("optuna log line", label)
    if code != 128 + sig:
        tally.add("status", f"{label}: {code}")
    lines = [line for line in err.splitlines() if line.startswith("devicefit: ")]
    if len(lines) != 1 or not last.startswith(_said(sig)):
        tally.add("line", f"{label}: {lines[-3:]}")
    tally.autograph_cache += (work / "tmp" / "__pycache__").is_dir()
    temps = [p.name for p in (work / "out").iterdir() if p.name.startswith(".")
             or p.name.endswith(".tmp")] + [p.name for p in (work / "tmp").iterdir()
                                            if p.name != "__pycache__"]
    if temps:
        tally.add("partial", f"{label}: {temps[:5]}")
    inside = any(t.user_attrs.get(INTERRUPTED, {}).get("by")
                 == signal.Signals(sig).name for t in _trials(work))
    tally.inside_trial += inside
    kept = next((work / "out").glob("*.tflite"), None)
    if kept is not None:
        tally.kept_checked += 1
        check = subprocess.run([*DEVICEFIT, "simulate", str(kept), "--profile",
                                str(cmd.profile), "--run"], env=_env(work),
                               capture_output=True, text=True, timeout=HANG_S)
        if check.returncode != 0:
            tally.add("kept candidate fails in the runtime", f"{label}: {check.stdout[-300:]}")
    if inside and tally.resumes < resumes:
        tally.resumes += 1
        shutil.rmtree(work / "out")
        (work / "out").mkdir()
        again = _run(cmd, work, None, 0.0, False)
        judged = _judged(work)
        if again.status not in (0, 1) or judged != cmd.max_trials:
            tally.add("resume", f"{label}: status {again.status}, {judged} judged of "
                                f"{cmd.max_trials}: {again.stderr[-300:]}")
    return duration


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="signalled runs per command")
    ap.add_argument("--resumes", type=int, default=1,
                    help="runs per command whose study is resumed after the signal")
    ap.add_argument("--commands", default="fit,fit-jobs2,search")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-trial-signals-") as tmp:
        work = Path(tmp)
        for cmd in commands(work, set(args.commands.split(","))):
            _fresh(work)
            reference = _run(cmd, work, None, 0.0, False)
            duration = reference.seconds
            if reference.status not in (0, 1) or _judged(work) != cmd.max_trials:
                print(f"{cmd.name}: the reference run failed (status {reference.status}, "
                      f"{_judged(work)} judged): {reference.stderr[-600:]}")
                return 2
            tally = Tally()
            for _ in range(args.runs):
                duration = trial(cmd, work, rng, duration, args.resumes, tally)
            results[cmd.name] = tally
            defects = sum(len(v) for v in tally.defects.values())
            print(f"{cmd.name:9s} {tally.runs} runs (reference run {reference.seconds:.0f} s, "
                  f"window at the end {duration:.0f} s): "
                  f"{tally.ended_before_signal} ended before the signal, "
                  f"{tally.after_the_work} signalled after the work was done, "
                  f"{tally.inside_trial} signalled inside a trial, {tally.kept_checked} kept "
                  f"candidates run in the runtime, {tally.resumes} studies resumed, "
                  f"{defects} defects", flush=True)
            for kind, items in tally.defects.items():
                print(f"  {kind}: {len(items)}; e.g. {items[0].splitlines()[0]}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({k: vars(v) for k, v in results.items()}, indent=1))
    return 1 if any(t.defects for t in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
