"""In-process synthetic and mock sources for the loaders: iterables of :class:`~vlmdata.dataset.schema.Sample`, no disk.

Both sources are infinite (no ``__len__``): iterate, or ``take(n)`` for a list, or ``get(i)`` for
random access. Sample ``i`` is the same for the same arguments whatever the order of access,
the number of threads or the state of the pool; ``vlmdata synth`` writes exactly
``take(n)`` of these sources to shards.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import count, islice
from typing import Any, Iterator

from vlmdata.dataset.schema import Sample
from vlmdata.errors import OptionsError
from vlmdata.profile.document import load_profile
from vlmdata.synthetic.generate import ProfileGenerator
from vlmdata.synthetic.images import ImagePool
from vlmdata.synthetic.mocks import MOCKS

EXACT_SLOTS = 1 << 62  # ImagePool slot = the content seed itself: the pool caches, never aliases


class _Base:
    threads: int = 0
    prefetch: int = 8

    def get(self, i: int) -> Sample:  # pragma: no cover - abstract
        raise NotImplementedError

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_from(0)

    def iter_from(self, start: int = 0) -> Iterator[Sample]:
        """Samples ``start, start+1, ...`` (built ``prefetch`` ahead on ``threads`` threads when > 0)."""
        if self.threads <= 0:
            for i in count(start):
                yield self.get(i)
            return
        with ThreadPoolExecutor(self.threads, thread_name_prefix="vlmdata-source") as ex:
            pending: deque = deque()
            it = count(start)
            try:
                for i in islice(it, self.prefetch):
                    pending.append(ex.submit(self.get, i))
                while True:
                    s = pending.popleft().result()
                    pending.append(ex.submit(self.get, next(it)))
                    yield s
            finally:
                for f in pending:
                    f.cancel()

    def take(self, n: int, start: int = 0) -> list[Sample]:
        """The first ``n`` samples (from ``start``) as a list."""
        if n < 0:
            raise OptionsError(f"`n` must be >= 0, got {n}")
        return list(islice(self.iter_from(start), n))


class SyntheticSource(_Base):
    """The synthetic twin of a profile, in process: images as encoded bytes (JPEG/PNG).

    ``profile`` is a profile dict (``vlmdata.profile.measure.load_profile``) or a path to one. Rows are
    sampled jointly (whole rows, epochs without replacement; see ``vlmdata.synthetic.generate``);
    each image is generated to its row's byte target and encoder settings and text to the exact
    token counts. ``pool`` (an :class:`ImagePool`, one made if None) caches encoded images by
    (spec, content seed): with ``variants=1`` (default here) a row always gives the same image
    bytes, as a real dataset repeats its images each epoch, so after the first epoch images are
    served from memory and generation is never the bottleneck (``pool_bytes`` bounds the cache;
    set it above the profile's total image bytes, the summary's ``images x bytes_per_image``
    mean, to keep every image). ``variants=0`` gives fresh images every epoch.
    ``threads`` > 0 builds samples ahead on threads (JPEG encode and numpy release the GIL).
    """

    def __init__(
        self,
        profile,
        seed: int = 0,
        pool: ImagePool | None = None,
        *,
        tokenizer=None,
        variants: int = 1,
        threads: int = 0,
        prefetch: int = 16,
        pool_bytes: int = 1 << 30,
    ):
        if isinstance(profile, (str, bytes)) or hasattr(profile, "__fspath__"):
            # load_profile is annotated str: a PathLike works there, a bytes path fails there (as before)
            profile = load_profile(profile)  # pyright: ignore[reportArgumentType]
        self.gen = ProfileGenerator(profile, seed, tokenizer, variants=variants)
        self.pool = pool if pool is not None else ImagePool(slots=EXACT_SLOTS, max_bytes=pool_bytes)
        if self.pool.slots != EXACT_SLOTS:
            raise OptionsError(
                "`pool`: SyntheticSource needs an ImagePool(slots=vlmdata.synthetic.source.EXACT_SLOTS): "
                "a smaller slot count would alias content seeds"
            )
        self.threads, self.prefetch = int(threads), max(1, int(prefetch))

    def get(self, i: int) -> Sample:
        images = [self.pool.get(spec, seed) for spec, seed in self.gen.image_items(i)]
        return self.gen.sample(i, images)

    def describe(self) -> dict[str, Any]:
        return self.gen.describe()


class MockSource(_Base):
    """Mock samples, in process: ``name`` is a registered mock (``synthetic.mocks.MOCKS``: ``"bridge-noise"``,
    ``"imagefree"``, ``"imagefree-fixed"``, ...); keyword ``options`` go to its generator.

    ``bridge-noise``: Megatron Bridge's mock VLM SFT data (``vlmdata.synthetic.bridge_noise``). With
    ``encoded=False`` (default) ``Sample.images`` holds ``PIL.Image.Image`` objects in memory,
    exactly like Bridge (no encode, no decode; the loader must use them as they are, skipping
    decode) and ``image_info[i].bytes`` is 0; with ``encoded=True`` they are lossless PNG bytes
    (what ``vlmdata synth --mock bridge-noise`` stores). Keyword options: ``image_size``,
    ``num_images``, ``num_base_examples``, ``prompt``, ``packing``.

    ``imagefree``: text-only samples (no images); ``profile=`` (dict or path) for its text
    lengths, else ``prompt_tokens``/``answer_tokens``; ``tokenizer=`` to count.
    """

    def __init__(self, name: str, seed: int = 0, *, threads: int = 0, prefetch: int = 16, **options):
        self.name = name
        self.impl = MOCKS[name].make(seed, **options)
        self.threads, self.prefetch = int(threads), max(1, int(prefetch))

    def get(self, i: int) -> Sample:
        return self.impl.sample(i)

    def describe(self) -> dict[str, Any]:
        return self.impl.describe()
