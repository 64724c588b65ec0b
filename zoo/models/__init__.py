"""Model plugins: every module here registers registry entries (and reproduction protocols) on import."""
