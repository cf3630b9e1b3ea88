"""The store contract suite (a package, so its module names do not clash with other tests)."""
