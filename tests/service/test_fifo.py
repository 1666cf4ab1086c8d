"""The generation lock: first come, first served (no server, no model)."""

from __future__ import annotations

import threading
import time

from app.service.fifo import FifoLock


def test_fifo_lock_serves_waiters_in_order():
    lock, order = FifoLock(), []
    lock.acquire()

    def waiter(i: int) -> None:
        with lock:
            order.append(i)

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        while lock.waiting < i + 1:  # queued before the next one starts
            time.sleep(0.001)
    assert not lock.acquire(blocking=False) and not lock.acquire(timeout=0.01)
    assert lock.waiting == 5
    lock.release()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3, 4] and not lock.locked() and lock.waiting == 0
