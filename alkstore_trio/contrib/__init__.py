"""Optional integrations, each behind its own extra; importing this package imports none.

- :mod:`alkstore_trio.contrib.prometheus` (``pip install 'alkstore_trio[prometheus]'``):
  counters, histograms and gauges for workers, fed by :meth:`Worker.events`.
- :mod:`alkstore_trio.contrib.opentelemetry` (``pip install 'alkstore_trio[opentelemetry]'``):
  a span per job run, linked to the trace that enqueued the job.

They sit above the runtime: they consume a worker's event stream (rule R9) and never
change what a worker does.
"""
