"""Model manager: the catalog of pairs, the local library, downloads, GGUF metadata (meta reads a file's
vocabulary; app.engine.llama.vocab holds the compatibility rule), compatibility, hardware, fit and GPU offload.
Imports app.engine only (and app.paths); the command line's ``models`` command is ``app.cli.models``."""
