"""Live mirroring (optional, off by default): a training run's curve in MLflow while it trains.

    STACKLM_LIVE_MLFLOW=sqlite:///results/mlflow/mlflow.db snakemake --profile profiles/cpu ...

With ``STACKLM_LIVE_MLFLOW`` set to a tracking URI, ``stacklm train`` starts a watcher beside
itself: a separate process, at the lowest CPU priority, in its own session, that reads the
training state file every ``POLL_S`` seconds and logs the checkpoints it has not logged yet to an
MLflow run (tagged ``stacklm.live`` and with the run's key), and ends once the training process
has ended. Nothing flows back: a watcher that cannot start, cannot import MLflow or cannot reach
the store writes one line to its own log (``<state>.live.log``) and stops, and the training job
neither waits for it nor learns of it. The environment variable, not the config, switches it on:
no setting a training job reads changes, so turning it on or off reruns nothing.

The watcher never creates the store (a fresh SQLite store written by parallel processes breaks
in its schema migration): it waits for ``stacklm tracking init`` to have created the store and
the experiment. ``stacklm tracking sync`` later replaces the live run with the complete one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from stacklm.tracking.mlflow_mirror import KEY_TAG, TrackingSettings
from stacklm.tracking.runs import CHECKPOINT_PLACE, curve_name

ENVIRONMENT = "STACKLM_LIVE_MLFLOW"
LIVE_TAG = "stacklm.live"
POLL_S = 30.0  # seconds between two reads of the training state


def start(state: Path, experiment: str, key: str, name: str, tags: Mapping[str, str]) -> None:
    """Start the watcher of the training state ``state`` when ``STACKLM_LIVE_MLFLOW`` is set; never raises."""
    uri = os.environ.get(ENVIRONMENT)
    if not uri:
        return
    log = state.with_name(state.name + ".live.log")
    description = json.dumps({"experiment": experiment, "key": key, "name": name, "tags": dict(tags)})
    command = [sys.executable, "-m", "stacklm.tracking.live", "--uri", uri, "--state", str(state), "--run", description,
               "--parent", str(os.getpid())]  # fmt: skip
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as output:
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True)
    except OSError as error:
        print(f"live mirror not started ({error}); training goes on", file=sys.stderr)


def watch(
    client: Any,
    experiment_id: str,
    run: Mapping[str, Any],
    read_curve: Callable[[], Sequence[Mapping[str, Any]]],
    training: Callable[[], bool],
    pause: Callable[[], None],
) -> str:
    """Log every checkpoint of ``read_curve()`` to a new MLflow run, ``pause()`` between two
    reads, until ``training()`` is false (then once more); the run's id."""
    from mlflow.entities import Metric

    tags = {KEY_TAG: run["key"], LIVE_TAG: "true", **run["tags"]}
    run_id = client.create_run(experiment_id, run_name=f"{run['name']} (live)", tags=tags).info.run_id
    logged = 0
    while True:
        running = training()
        curve = read_curve()
        now = int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, int(record["examples_seen"])) for record in curve[logged:] for name, value in curve_points(record)]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        logged = len(curve)
        if not running:
            client.set_terminated(run_id)
            return run_id
        pause()


def curve_points(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The curves' values at one checkpoint of the state, named as the finished run's curves."""
    measured = [(column, value) for column, value in record.items() if column not in (*CHECKPOINT_PLACE, "scores")]
    return [(curve_name(column), value) for column, value in measured + list(record.get("scores", {}).items())]


def wait_while(running: Callable[[], bool], seconds: float) -> None:
    """Sleep ``seconds``, or less when ``running()`` turns false (checked every second)."""
    deadline = time.monotonic() + seconds
    while running() and time.monotonic() < deadline:
        time.sleep(min(1.0, deadline - time.monotonic()))


def state_curve(state: Path) -> list[dict[str, Any]]:
    """The checkpoints recorded in a training state file so far; none while it does not exist."""
    from stacklm.training import checkpoint as checkpoint_file

    return list(checkpoint_file.load(state)["curve"]) if state.is_file() else []


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacklm.tracking.live", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True)
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--run", required=True, help="JSON: experiment, key, name, tags")
    parser.add_argument("--parent", required=True, type=int, help="the training process")
    args = parser.parse_args(argv)
    os.nice(19)  # never compete with training for the CPU
    run = json.loads(args.run)
    settings = TrackingSettings(uri=args.uri)
    training = functools.partial(process_alive, args.parent)
    store = settings.sqlite_path()
    while store is not None and not store.is_file():  # `stacklm tracking init` creates it; never here
        if not training():
            print(f"{store}: no MLflow store while the run trained; nothing mirrored live", file=sys.stderr)
            return 0
        wait_while(training, POLL_S)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=settings.resolved_uri())
    experiment = client.get_experiment_by_name(run["experiment"])
    if experiment is None:
        print(f"{settings.resolved_uri()}: no experiment {run['experiment']!r} (stacklm tracking init creates it)", file=sys.stderr)
        return 0
    run_id = watch(client, experiment.experiment_id, run, lambda: state_curve(args.state), training, lambda: wait_while(training, POLL_S))
    print(f"mirrored live as MLflow run {run_id}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
