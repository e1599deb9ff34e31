"""The fits of the peer benchmark (``bench_peers.py``): one function per (library, method), each run in
its own process, under its library's own interpreter.

    python peer_fits.py LIBRARY METHOD DATA.npz

fits ``LIBRARY``'s ``METHOD`` to the arrays of ``DATA.npz`` (written by ``bench_peers.py``: ``X``,
``y`` and ``Xte``, ``yte`` the training and test rows, ``Z0`` the inducing inputs every library
starts from) and prints one line ``RESULT {json}``: fit CPU (``time.process_time`` of this process,
all threads) and wall seconds from the model's construction to the end of its fit, the test NLPD
(mean -log p(y*|x*)), the test error rate (classification) or RMSE (regression), iterations or
steps, the library's version and a note.  Nothing before the construction is timed (imports, data
loading) and nothing after the fit (test predictions).  Every library's first fit in a fresh
process is what is timed: gpdsl loads its compiled Numba kernels from the on-disk cache (or compiles
them, when ``bench_peers.py`` points ``NUMBA_CACHE_DIR`` at an empty folder), GPflow traces its
``tf.function``, GPyTorch builds its graph, all inside the timing.

This module imports nothing but the standard library and NumPy at the top, so that it runs under
each peer's virtualenv (GPflow needs numpy < 2, see ``setup_peer_envs.sh``); each fit imports its
library.  Classification labels are +-1 in the npz (gpdsl's convention); each peer gets its own.

The models, the same in every library where the method allows (``bench_peers.py`` says which
problems use which):

* classification: an isotropic squared-exponential kernel starting at lengthscale sqrt(D),
  variance 1; no bias or mean function (gpdsl's ``likelihood.bias`` is fixed at 0); the probit link
  (GPy's, GPflow's and GPyTorch's Bernoulli default), the logit for gpdsl's Pólya-Gamma methods
  (the method needs it);
* regression: squared-exponential, lengthscale 1, variance 1, Gaussian noise variance 1 (GPflow's
  default start);
* L-BFGS-B to at most ``MAX_ITER`` iterations for the full-batch methods, each library's own
  stopping tests; ``STEPS`` minibatch steps of ``BATCH`` rows for the stochastic ones (gpdsl's stop
  earlier by their stopping rule).
"""
import json
import math
import os
import sys
import time
import warnings

import numpy as np

MAX_ITER = 1000          # gpdsl's fit default, GPy's optimize default, and the cap given GPflow's Scipy
STEPS, BATCH = 1000, 1024
SUBSAMPLE = 5000         # gpdsl's PGPR-HGV at N = 10^6: fit(subsample=5000)


def classification_scores(p_true):
    """Test NLPD and error rate from each test point's predictive probability of its true label."""
    p = np.clip(np.asarray(p_true, dtype=float), 1e-300, 1.0)
    return {"nlpd": float(-np.mean(np.log(p))), "error": float(np.mean(p < 0.5))}


def regression_scores(mean, var, yte):
    """Test NLPD of N(y* | mean, var) (var includes the noise) and RMSE."""
    mean, var = np.ravel(mean), np.ravel(var)
    nlpd = 0.5 * np.mean(np.log(2 * np.pi * var) + (yte - mean) ** 2 / var)
    return {"nlpd": float(nlpd), "rmse": float(np.sqrt(np.mean((yte - mean) ** 2)))}


class Timer:
    """Process CPU and wall seconds of a ``with`` block."""

    def __enter__(self):
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self.cpu0, time.perf_counter() - self.wall0


# ------------------------------------------------------------------------------------------- gpdsl
def _gpdsl_classifier(d, inducing, inference, link="probit", *, subsample=None):
    import gpdsl as gd
    D = d["X"].shape[1]
    model = gd.Model(gd.kernels.SquaredExponential(math.sqrt(D), 1.0),
                     gd.likelihoods.Bernoulli(link, bias=gd.Fixed(0.0)), inducing, inference)
    with warnings.catch_warnings(record=True) as caught, Timer() as t:
        warnings.simplefilter("always")
        post = model.fit(d["X"], d["y"], max_iter=MAX_ITER, subsample=subsample)
    out = classification_scores(np.exp(post.log_predictive(d["Xte"], d["yte"])))
    M = post.state.Z.shape[0] if hasattr(post.state, "Z") else d["Z0"].shape[0]
    warned = sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught})
    return dict(out, cpu=t.cpu, wall=t.wall, iters=int(post.n_iterations), converged=bool(post.converged), M=int(M),
                sweeps=int(post.total_sweeps or 0), version=gd.__version__, note="; ".join(warned) or "no warnings")


def gpdsl_fitc_ep(d):
    """FITC-EP (Naish-Guzman & Holden), Z optimised from Z0, probit."""
    import gpdsl as gd
    return _gpdsl_classifier(d, gd.inducing.Optimized(gd.inducing.Fixed(d["Z0"])), gd.inference.EP())


def gpdsl_svgp(d):
    """Full-batch SVGP (natural steps on q, L-BFGS-B on the rest), Z optimised from Z0, probit."""
    import gpdsl as gd
    return _gpdsl_classifier(d, gd.inducing.Optimized(gd.inducing.Fixed(d["Z0"])), gd.inference.SVGP())


def gpdsl_pgpr_kmeans(d):
    """PGPR (Pólya-Gamma collapsed bound), Z fixed at the k-means Z0, logit."""
    import gpdsl as gd
    return _gpdsl_classifier(d, gd.inducing.Fixed(d["Z0"]), gd.inference.PolyaGamma(), "logit")


def _hgv():
    import gpdsl as gd
    return gd.inducing.GreedyVariance(tol_per_point=1e-3, max_m=300, weighted=True, reinit=True)


def gpdsl_pgpr_hgv(d):
    """PGPR with HGV choosing Z and M (tol_per_point 1e-3, re-selection rounds), logit."""
    import gpdsl as gd
    return _gpdsl_classifier(d, _hgv(), gd.inference.PolyaGamma(), "logit")


def gpdsl_pgpr_hgv_subsample(d):
    """PGPR-HGV fitted on SUBSAMPLE random rows, its posterior on all N (``fit(subsample=)``), logit."""
    import gpdsl as gd
    return _gpdsl_classifier(d, _hgv(), gd.inference.PolyaGamma(), "logit", subsample=SUBSAMPLE)


def gpdsl_pg_stochastic(d, **rule):
    """Stochastic Pólya-Gamma, minibatches of BATCH, at most STEPS steps, Z fixed at Z0, logit;
    ``rule`` the stopping rule's options (its defaults if none)."""
    import gpdsl as gd
    return _gpdsl_classifier(d, gd.inducing.Fixed(d["Z0"]), gd.inference.PolyaGamma(minibatch=BATCH, **rule), "logit")


def gpdsl_svgp_minibatch(d, **rule):
    """Minibatch SVGP, minibatches of BATCH, at most STEPS steps, Z fixed at Z0, probit; ``rule`` the
    stopping rule's options (its defaults if none)."""
    import gpdsl as gd
    return _gpdsl_classifier(d, gd.inducing.Fixed(d["Z0"]), gd.inference.SVGP(batch_size=BATCH, **rule))


# The stopping rule's shorter window (its accuracy cost measured in the ``stop_window`` entry of
# SVGP's and PolyaGamma's docstrings): windows of SHORT_WINDOW steps instead of the default 200,
# so that a run may stop after 2 SHORT_WINDOW steps.
SHORT_WINDOW = 100


def gpdsl_pg_stochastic_short_window(d):
    """gpdsl_pg_stochastic with ``stop_window=SHORT_WINDOW``."""
    return gpdsl_pg_stochastic(d, stop_window=SHORT_WINDOW)


def gpdsl_svgp_minibatch_short_window(d):
    """gpdsl_svgp_minibatch with ``stop_window=SHORT_WINDOW``."""
    return gpdsl_svgp_minibatch(d, stop_window=SHORT_WINDOW)


def gpdsl_vfe(d):
    """Titsias' VFE, Z optimised from Z0."""
    import gpdsl as gd
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(1.0),
                     gd.inducing.Optimized(gd.inducing.Fixed(d["Z0"])), gd.inference.VFE())
    with warnings.catch_warnings(record=True) as caught, Timer() as t:
        warnings.simplefilter("always")
        post = model.fit(d["X"], d["y"], max_iter=MAX_ITER)
    pred = post.predict(d["Xte"])
    warned = sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught})
    return dict(regression_scores(pred["y_mean"].values, pred["y_var"].values, d["yte"]), cpu=t.cpu, wall=t.wall,
                iters=int(post.n_iterations), converged=bool(post.converged), M=int(d["Z0"].shape[0]),
                version=gd.__version__, note="; ".join(warned) or "no warnings")


# --------------------------------------------------------------------------------------------- GPy
def gpy_epdtc(d):
    """GPy's ``SparseGPClassification`` (EPDTC, ``ep_mode="alternated"``), Z trained from Z0, ``optimize()``
    at its defaults (L-BFGS-B, max_iters 1000)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import GPy
    X, Z0 = d["X"], d["Z0"]
    np.random.seed(0)
    with warnings.catch_warnings(), Timer() as t:
        warnings.simplefilter("ignore")
        m = GPy.models.SparseGPClassification(X, (d["y"] > 0).astype(float)[:, None], Z=Z0.copy(),
                                              kernel=GPy.kern.RBF(X.shape[1], lengthscale=math.sqrt(X.shape[1]),
                                                                  variance=1.0))
        m.optimize(max_iters=MAX_ITER)
    p1 = m.predict(d["Xte"])[0][:, 0]
    run = m.optimization_runs[-1]
    return dict(classification_scores(np.where(d["yte"] > 0, p1, 1.0 - p1)), cpu=t.cpu, wall=t.wall,
                iters=int(getattr(run, "funct_eval", 0) or 0), converged=run.status == "Converged",
                M=int(Z0.shape[0]), version=GPy.__version__, note=f"status {run.status!r}")


# ------------------------------------------------------------------------------------------ GPflow
def _tensorflow_one_thread():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _gpflow_minimise(gpflow, model, data):
    # SGPR holds its data (InternalDataTrainingLossMixin), SVGP is given it.
    loss = model.training_loss_closure(compile=True) if data is None else model.training_loss_closure(data, compile=True)
    result = gpflow.optimizers.Scipy().minimize(loss, model.trainable_variables, options={"maxiter": MAX_ITER})
    return int(result.nit), bool(result.success), str(result.message)


def gpflow_svgp(d):
    """GPflow's ``SVGP`` (whitened, full q_sqrt, Z trainable: GPflow's defaults), probit
    ``Bernoulli``, full-batch ``gpflow.optimizers.Scipy`` (L-BFGS-B) of all parameters."""
    tf = _tensorflow_one_thread()
    import gpflow
    X, y = d["X"], (d["y"][:, None] > 0).astype(float)
    with Timer() as t:
        kernel = gpflow.kernels.SquaredExponential(lengthscales=math.sqrt(X.shape[1]), variance=1.0)
        model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Bernoulli(), d["Z0"].copy(), whiten=True,
                                   num_data=X.shape[0])
        nit, success, message = _gpflow_minimise(gpflow, model, (X, y))
    p1 = model.predict_y(d["Xte"])[0].numpy().ravel()
    return dict(classification_scores(np.where(d["yte"] > 0, p1, 1.0 - p1)), cpu=t.cpu, wall=t.wall, iters=nit,
                converged=success, M=int(d["Z0"].shape[0]), version=f"{gpflow.__version__} (TensorFlow {tf.__version__})",
                note=message)


def gpflow_sgpr(d):
    """GPflow's ``SGPR`` (Titsias' VFE; Z trainable), ``gpflow.optimizers.Scipy`` (L-BFGS-B)."""
    tf = _tensorflow_one_thread()
    import gpflow
    X, y = d["X"], d["y"][:, None]
    with Timer() as t:
        model = gpflow.models.SGPR((X, y), gpflow.kernels.SquaredExponential(lengthscales=1.0, variance=1.0),
                                   d["Z0"].copy(), noise_variance=1.0)
        nit, success, message = _gpflow_minimise(gpflow, model, None)
    mean, var = model.predict_y(d["Xte"])
    return dict(regression_scores(mean.numpy(), var.numpy(), d["yte"]), cpu=t.cpu, wall=t.wall, iters=nit,
                converged=success, M=int(d["Z0"].shape[0]), version=f"{gpflow.__version__} (TensorFlow {tf.__version__})",
                note=message)


# ---------------------------------------------------------------------------------------- GPyTorch
def gpytorch_svgp_parts(Z0, n, lr=0.01):
    """GPyTorch's SVGP classification example at inducing inputs Z0 (M, D), float64, in training mode:
    ``CholeskyVariationalDistribution``, whitened ``VariationalStrategy`` with learnt inducing
    locations (its default), ``ScaleKernel(RBFKernel)`` at lengthscale sqrt(D) and outputscale 1,
    ``BernoulliLikelihood`` (probit), Adam (``lr``) on all parameters and ``VariationalELBO(num_data=n)``.
    Returns (model, likelihood, optimiser, elbo); ``peer_gpytorch_svgp.py`` fits the same."""
    import gpytorch
    import torch

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            dist = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            super().__init__(gpytorch.variational.VariationalStrategy(self, Z, dist, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SVGP(torch.tensor(Z0)).double()
    likelihood = gpytorch.likelihoods.BernoulliLikelihood().double()
    model.covar_module.base_kernel.lengthscale = math.sqrt(Z0.shape[1])
    model.covar_module.outputscale = 1.0
    model.train()
    likelihood.train()
    optimiser = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=lr)
    return model, likelihood, optimiser, gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)


def gpytorch_adam_steps(X, y, model, optimiser, elbo, steps, batch, generator, after_step=None):
    """``steps`` Adam steps on the ELBO of ``batch`` rows of the tensors X, y drawn at random by
    ``generator``, calling ``after_step()`` after each (a timer's mark)."""
    import torch
    for _ in range(steps):
        rows = torch.randint(0, X.shape[0], (batch,), generator=generator)
        optimiser.zero_grad()
        loss = -elbo(model(X[rows]), y[rows])
        loss.backward()
        optimiser.step()
        if after_step is not None:
            after_step()


def gpytorch_svgp(d):
    """``gpytorch_svgp_parts`` (learning rate 0.01), STEPS Adam steps of BATCH rows drawn at random,
    one torch thread."""
    import gpytorch
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    X, y = torch.tensor(d["X"]), torch.tensor((d["y"] > 0).astype(float))
    n = X.shape[0]
    generator = torch.Generator().manual_seed(0)
    with Timer() as t:
        model, likelihood, optimiser, elbo = gpytorch_svgp_parts(d["Z0"], n)
        gpytorch_adam_steps(X, y, model, optimiser, elbo, STEPS, BATCH, generator)
    model.eval()
    likelihood.eval()
    Xte = torch.tensor(d["Xte"])
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        p1 = np.concatenate([likelihood(model(Xte[i:i + 2000])).mean.numpy() for i in range(0, Xte.shape[0], 2000)])
    return dict(classification_scores(np.where(d["yte"] > 0, p1, 1.0 - p1)), cpu=t.cpu, wall=t.wall, iters=STEPS,
                converged=True, M=int(d["Z0"].shape[0]), version=f"{gpytorch.__version__} (torch {torch.__version__})",
                note=f"Adam lr 0.01, {STEPS} steps of {BATCH}")


FITS = {("gpdsl", name[len("gpdsl_"):]): fn for name, fn in list(globals().items()) if name.startswith("gpdsl_")}
FITS.update({("gpy", "epdtc"): gpy_epdtc, ("gpflow", "svgp"): gpflow_svgp, ("gpflow", "sgpr"): gpflow_sgpr,
             ("gpytorch", "svgp"): gpytorch_svgp})


def main(argv):
    library, method, path = argv
    with np.load(path) as data:
        d = {k: data[k] for k in data.files}
    print("RESULT " + json.dumps(FITS[library, method](d)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
