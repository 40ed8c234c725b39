"""The names of the mocks, defined once (light: no numpy or PIL, so the CLI can show them in ``--help``).

``imagefree`` and ``bridge-noise`` are the generators of ``vlmdata.synthetic.mocks``; ``imagefree-fixed``
is the image-free mock with fixed-length text (16-token prompt, 256-token answer), a view the loader
and the audit offer.
"""

IMAGEFREE, BRIDGE_NOISE = "imagefree", "bridge-noise"
MOCKS = (IMAGEFREE, BRIDGE_NOISE)  # the mock generators
IMAGEFREE_FIXED = "imagefree-fixed"
