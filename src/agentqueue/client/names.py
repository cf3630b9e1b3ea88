"""The environment variables the HTTP client reads (a module of their own, so that the command
line names them without loading the client)."""

URL_ENV = "AGENTQUEUE_API"
"""The server's URL."""
TOKEN_ENV = "AGENTQUEUE_TOKEN"
"""The API token."""
