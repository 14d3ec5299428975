"""The local pool of `data prepare`: the pending shards on forked worker processes (each loads the plan and
tokenizer once), their progress sent back on a queue, a worker's input problems sent back as data, and the pool
stopped at once on a signal or an error."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from typing import Any, Callable, Iterator

from nemo_recipes.data import fast_encoder, shard_plan
from nemo_recipes.data.progress import Progress
from nemo_recipes.data.shard_plan import ShardPlan
from nemo_recipes.data.shard_work import one_thread_per_worker, process_shard
from nemo_recipes.data.sources import InvalidDataError
from nemo_recipes.errors import InvalidInputError, Problem

# Worker processes of the local pool: the plan and tokenizer, loaded once per process.
_WORKER: dict[str, Any] = {}


#: The signals that stop the command. The parent stops the pool when one arrives; the workers must not run the
#: command's handler (cli/_signals.py) that fork copied into them: it raised inside their exit finalizers when the
#: pool's SIGTERM came, and a worker then waited on a queue lock for ever.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """The stopping signals held back while the pool forks, so that no worker runs a line with the parent's handler
    (the signal is delivered to the parent after, and the pool's helper threads keep the mask: the main thread
    takes every signal)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _nothing(_: int) -> None:
    pass


def _worker_init(plan_path: str, queue: Any, parent: int) -> None:
    # SIGTERM (the pool's terminate, a kill of the group) ends a worker at once; Ctrl-C reaches the whole process
    # group, and it is the parent's to act on (it stops the pool).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)
    _WORKER["plan"] = shard_plan.read_plan(plan_path)
    _WORKER["encoder"] = fast_encoder.load(
        _WORKER["plan"].tokenizer.path, _WORKER["plan"].encoder, _WORKER["plan"].tokenizer.fingerprint
    )
    _WORKER["queue"] = queue
    _WORKER["parent"] = parent


def _worker_report(documents: int, size: int, tokens: int) -> None:
    if os.getppid() != _WORKER["parent"]:
        os._exit(1)  # the prepare that started us is gone (killed): stop, its re-run redoes this shard
    _WORKER["queue"].put((documents, size, tokens))


def _worker_shard(index: int) -> Any:
    plan = _WORKER["plan"]
    try:
        return process_shard(plan, plan.shards[index], _WORKER["encoder"], _worker_report)
    except InvalidInputError as error:  # sent back as data: the exception's own pickling loses its problems
        return {"problems": [p.__dict__ for p in error.problems]}


def run_local(
    plan: ShardPlan, todo: list[int], workers: int, progress: Progress, on_done: Callable[[int], None] = _nothing
) -> None:
    """The shards `todo` on a pool of `workers` processes (in this process when one is enough); `on_done(index)` is
    called (on another thread, with a pool) as each shard gets its receipt."""
    if workers <= 1 or len(todo) <= 1:
        encoder = fast_encoder.load(plan.tokenizer.path, plan.encoder, plan.tokenizer.fingerprint)
        with one_thread_per_worker():
            for index in todo:
                process_shard(plan, plan.shards[index], encoder, progress.update)
                on_done(index)
        return
    # Forked: the workers inherit the imported NumPy and tokenizer libraries.
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with one_thread_per_worker():
        with _signals_blocked():
            pool = context.Pool(
                min(workers, len(todo)), _worker_init, (str(plan.work / "plan.json"), queue, os.getpid())
            )
        finished = False
        try:
            # A finished task puts a None on the progress queue, so that the loop below wakes when a result lands
            # rather than at its next poll (it had slept up to 0.2 s after the last shard).
            def wake(outcome: Any) -> None:
                if isinstance(outcome, dict) and "shard" in outcome:  # a receipt (not problems, not an exception)
                    on_done(outcome["shard"])
                queue.put(None)

            results = [pool.apply_async(_worker_shard, (index,), callback=wake, error_callback=wake) for index in todo]
            while True:
                _drain(queue, progress, timeout=0.2)
                for result in results:
                    if result.ready():
                        outcome = result.get()  # re-raises a worker's exception (an OSError of a full disk)
                        if "problems" in outcome:
                            raise InvalidDataError([Problem(**p) for p in outcome["problems"]], context="data prepare")
                if all(result.ready() for result in results):
                    break
            _drain(queue, progress, timeout=0)
            finished = True
        finally:
            if finished:  # every task is done: the idle workers take the pool's end-of-work sentinel and exit
                pool.close()
            else:  # a stop or an error: SIGTERM ends the workers (their default action, see _worker_init)
                pool.terminate()
            pool.join()


def _drain(queue: Any, progress: Progress, timeout: float) -> None:
    import queue as queues

    try:
        item = queue.get(timeout=timeout) if timeout else queue.get_nowait()
        while True:
            if item is not None:  # None: a task finished (run_local's wake)
                progress.update(*item)
            item = queue.get_nowait()
    except queues.Empty:
        pass
