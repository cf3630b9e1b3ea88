"""Service functions: the one place operations are carried out.

The public Python API (``AsyncQueue``), the CLI and, later, the HTTP API and dashboard are shells
over these functions; none holds a business rule of its own (ARCHITECTURE rule 8).
"""
