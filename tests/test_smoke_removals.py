"""The worker reads its checkpoints only after NeMo's background removals of superseded ones have ended (with
asynchronous saving NeMo's ModelCheckpoint deletes them in threads of their own)."""

from __future__ import annotations

import shutil
import threading
import time

from nemo_recipes.smoke_training.worker import removals_finished


def _remove_later(path, seconds: float) -> threading.Thread:
    def remove() -> None:
        time.sleep(seconds)
        shutil.rmtree(path)

    thread = threading.Thread(target=remove)  # not a daemon, as NeMo's removal threads
    thread.start()
    return thread


def test_the_worker_waits_for_a_removal_thread_before_reading(tmp_path):
    superseded = tmp_path / "step=14-last"
    (superseded / "weights").mkdir(parents=True)
    thread = _remove_later(superseded, 0.5)
    removals_finished(timeout=30)
    assert not thread.is_alive() and not superseded.exists()


def test_the_wait_is_bounded(tmp_path):
    (tmp_path / "slow").mkdir()
    thread = _remove_later(tmp_path / "slow", 3.0)
    started = time.monotonic()
    removals_finished(timeout=0.2)
    assert time.monotonic() - started < 2.0 and thread.is_alive()
    thread.join()
