"""Reading and writing gpdsl's files.

* :mod:`gpdsl.io.spec`: model files, Model <-> plain dict <-> TOML.
* :mod:`gpdsl.io.netcdf`: :func:`gpdsl.load` and :func:`gpdsl.from_xarray`, the checked reading
  of a saved posterior; :mod:`gpdsl.io.layout` is what a posterior file holds, and
  :mod:`gpdsl.io.files` the one-step replacement that :meth:`gpdsl.Posterior.save` writes with.
* :mod:`gpdsl.io.arviz`: :meth:`gpdsl.Posterior.to_inference_data` (everything that touches ArviZ).

This package's face imports none of them: :mod:`gpdsl.posterior` imports the low ones
(``files``, ``layout``, ``arviz``), and ``netcdf``, which builds Models and Posteriors, imports
those; importing the package for one of them must not import the others.
"""
