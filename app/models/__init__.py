"""Model manager: the catalog of pairs, the local library, downloads, GGUF metadata, compatibility and fit."""
