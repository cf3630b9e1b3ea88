"""The dashboard at ``/`` of the API server: server-rendered pages over the service layer, a
token login with an HttpOnly session cookie and CSRF-checked forms, SVG charts drawn in Python,
and a stylesheet and a small refresh script shipped in the package (no CDN)."""
