"""The run resolved once, before anything is measured: ``resolve`` (flags > the Bridge YAML > the model's config.json >
the device's defaults, into a ``Resolved``), ``estimate`` (parameters, peak memory and time of the model and of the
slice one device can hold; the slice that fits) and ``plan`` (the ``AuditPlan`` every phase reads: the run, the
benchmark's configuration and its arms, the loader options of each measured name)."""
