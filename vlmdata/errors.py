"""The one error base and the handling policy: every error vlmdata raises because of a user's input or environment
derives from ``VlmdataError``, so a caller (the CLI above all) catches one class and prints one line.

Policy, in one place:

- A user's mistake (a path, a value, a file's content) raises a ``VlmdataError`` subclass whose message names the
  library parameter (``seq_length``) or the file and key (``run.yaml: train.micro_batch_size``) and the input, and
  says how to fix it; never a CLI flag (the CLI maps parameters to flags: ``vlmdata.cli.args.PARAM_FLAGS``) and never
  a traceback. The CLI catches ``VlmdataError`` once (``vlmdata.cli.main``) and exits 2.
- A bad sample is not an error of the run: it is skipped, counted and named (the build's manifest, the loader's
  skips); a run that writes nothing useful exits non-zero.
- Internal signals that never reach a user (a sample that needs its full bytes, a broken worker) are not
  ``VlmdataError``.
- Subclasses stay where their concept lives and keep older bases (``ValueError``, ``OSError``) where callers relied
  on them. The families, by the component that raises them:

  ============ =====================================================================================================
  options      ``OptionsError`` (here): an options object's value; ``BuildOptionsError``, the audit's
               ``AuditConfigError``, ``RunSpecError`` derive from it or from ``AuditError``
  storage      ``StorageError`` (storage.urls), ``OutputError`` (cli.streams)
  dataset      ``ManifestError``, ``EnergonIndexError``, ``BadSampleError``, ``OutputRefused``, ``TarReadError``
  sources      ``SourceError`` (sources.base), ``MockError`` (synthetic.mocks), ``TokenizerArgumentError`` (qwen)
               ``SourceOptionsError`` (sources.request: a ``SourceRequest`` field; also an ``OptionsError``)
  build        ``BuildError`` (ingest.options), ``EngineError`` (ingest.engines.base)
  loaders      ``LoaderSourceError``, ``LoaderStateError``, ``EmptyEpochError``, ``HFLoadError`` (interop.hf)
  profile      ``ProfileError``, ``ThresholdError``
  audit        ``AuditError`` (here; re-exported by audit.sources.registry) and ``ModelConfigError``,
               ``BridgeConfigError`` (here), ``LogError``, ``WorkloadMismatch``, ``ImagePadMismatch``
  benchmarks   ``BenchmarkError``; the CLI's own: ``UserError`` (cli.console)
  ============ =====================================================================================================

Depends on nothing.
"""


class VlmdataError(Exception):
    """Base of every user-facing vlmdata error: the message says what input is wrong and how."""


class OptionsError(VlmdataError, ValueError):
    """An options object (``BuildOptions``, ``LoaderOptions``, ...) got an unknown or invalid value;
    the message names the parameter."""


class BridgeConfigError(VlmdataError):
    """A Megatron Bridge config YAML (``vlmdata.audit.settings.bridge_config``) cannot be used: the file is missing, not a
    regular file, too large, not YAML, not a ``ConfigContainer`` mapping, or a field has the wrong type; the message
    names the file and, where there is one, the field's YAML path.

    Attributes:
        path: the file as given.
        field: the dotted YAML path of the offending field (``train.micro_batch_size``), or None.
    """

    def __init__(self, message: str, path: str = "", field: str | None = None):
        super().__init__(message)
        self.path = path
        self.field = field


class AuditError(VlmdataError):
    """The audit cannot run as asked (bad source, loader option, workload, sequence length): one line for the user.
    Messages name library parameters (``seq_length``) or the file and key; the CLI maps parameters to its flags."""
