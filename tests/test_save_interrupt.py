"""Posterior.save under SIGINT at random moments (issue 25 item 8c).

One SIGINT in 180 interrupted saves left a ``.tmp`` file behind, and one was swallowed in the
``__del__`` of xarray's / scipy's netCDF objects (printed as "Exception ignored in ...", the save
went on and the caller never saw a KeyboardInterrupt).  Here a real SIGINT (``os.kill`` from a
timer thread, so it lands anywhere in the main thread's Python code, destructors included) is sent
at a seeded random moment spread over a save's duration, several hundred times.
"""
import os
import signal
import threading
import time

import numpy as np
import pytest

import gpdsl as gd

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")

TRIALS = 400
MIN_TRIALS = 150
# Interrupts that must land inside a save (the rest land after it returns).  On an idle machine
# most do; with the machine loaded (two test suites at once) the timer thread's wake-up is late and
# only 88 of 400 did, so the test counts them instead of asking for a share.
MIN_IN_SAVE = 60
# The timer's delay is drawn from [0, SPREAD x the save's time]: some land after the save, to
# check that an interrupt arriving late still surfaces.  Under a full suite the timer thread wakes
# late, and at 1.2 only 49 and 54 of 400 landed inside (2026-11-27); at 0.8 more do.
SPREAD = 0.8


def _posteriors():
    rng = np.random.default_rng(25)
    X = rng.uniform(-3.0, 3.0, (60, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(60)
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(0.1))
    return [model.fit(X, y, optimize=False) for model in
            (model, gd.Model(gd.kernels.SquaredExponential(0.5, 1.0), gd.likelihoods.Gaussian(0.1)))]


def _one_interrupted_save(post, target, delay):
    """Save ``post`` over ``target`` while a thread sends this process SIGINT after ``delay`` s.

    Returns where the KeyboardInterrupt surfaced: ``"save"`` (raised by save), ``"after"`` (the
    signal came after save had returned) or None (it never surfaced: swallowed).
    """
    go = threading.Event()

    def send():
        # Timed from the moment the main thread is about to call save, not from the thread's
        # start (which the main thread waits for, and where the signal would land otherwise).
        go.wait()
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    where = None
    try:
        go.set()
        post.save(target)
    except KeyboardInterrupt:
        where = "save"
    # The signal may still be on its way: wait for the thread to send it, then give the main
    # thread time to run its handler: a few interruptible sleeps where save raised already (to
    # catch a second KeyboardInterrupt), up to a second where it has not (on a loaded machine the
    # handler of a signal sent after save returned ran more than 2.5 ms later).
    try:
        sender.join()
        for _ in range(5 if where == "save" else 2000):
            time.sleep(0.0005)
    except KeyboardInterrupt:
        assert where is None, "two KeyboardInterrupts for one SIGINT"
        where = "after"
    return where


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="SIGINT reaches Python's handler in the main thread only")
def test_sigint_at_random_moments_surfaces_and_leaves_old_or_new(tmp_path):
    old, new = _posteriors()
    contents = {}
    for label, post in (("old", old), ("new", new)):
        post.save(tmp_path / f"{label}.nc")
        contents[label] = (tmp_path / f"{label}.nc").read_bytes()
    target = tmp_path / "target.nc"
    # The save's own time, warm (the first save pays for imports) and unloaded (the minimum): a
    # duration inflated by a slow first save or a busy moment put most delays past the save's end
    # (49 of 400 inside it, CI 2026-11-27, with the median of the first five).
    new.save(target)
    durations = []
    for _ in range(9):
        start = time.perf_counter()
        new.save(target)
        durations.append(time.perf_counter() - start)
    duration = float(np.min(durations))
    rng = np.random.default_rng(8)
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    outcomes = {"save": 0, "after": 0}
    labels = {"old": 0, "new": 0}
    # On a loaded machine the loop stops at the deadline, after at least MIN_TRIALS trials.
    deadline = time.perf_counter() + 15.0
    trials = 0
    try:
        for trial in range(TRIALS):
            if trial >= MIN_TRIALS and outcomes["save"] >= MIN_IN_SAVE and time.perf_counter() > deadline:
                break
            trials += 1
            target.write_bytes(contents["old"])
            where = _one_interrupted_save(new, target, rng.uniform(0.0, SPREAD * duration))
            assert where is not None, f"trial {trial}: the SIGINT never surfaced as KeyboardInterrupt"
            outcomes[where] += 1
            stray = sorted(set(os.listdir(tmp_path)) - {"old.nc", "new.nc", "target.nc"})
            assert not stray, f"trial {trial}: left behind {stray}"
            content = target.read_bytes()
            label = next((k for k, v in contents.items() if v == content), None)
            assert label is not None, f"trial {trial}: the file is neither the old nor the new posterior"
            labels[label] += 1
    finally:
        signal.signal(signal.SIGINT, previous)
    # Both files loaded and checked once (checksums included); every trial matched one byte for byte.
    for label, post in (("old", old), ("new", new)):
        assert gd.load(tmp_path / f"{label}.nc").log_evidence == post.log_evidence
    # Enough interrupts must land inside saves, or the test tested little.
    assert outcomes["save"] >= MIN_IN_SAVE, outcomes
    assert labels["old"] + labels["new"] == trials


def test_sigint_handler_restored_and_a_custom_handler_still_called(tmp_path):
    """The deferral is temporary: after save, SIGINT's handler is the caller's again, and a
    caller's own handler receives an interrupt that arrived during the save (once, after it)."""
    post = _posteriors()[0]
    calls = []

    def handler(signum, frame):
        calls.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        real_replace = os.replace

        def replace_with_interrupt(src, dst):
            os.kill(os.getpid(), signal.SIGINT)           # lands inside the save's critical window
            time.sleep(0.01)
            assert calls == [], "the handler ran inside the save"
            real_replace(src, dst)

        os.replace = replace_with_interrupt
        try:
            post.save(tmp_path / "p.nc")
        finally:
            os.replace = real_replace
        assert calls == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert os.listdir(tmp_path) == ["p.nc"]
    assert gd.load(tmp_path / "p.nc").log_evidence == post.log_evidence
