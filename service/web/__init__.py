"""The HTTP edge: the Flask app, bodies and queries, auth, errors, OpenAPI, routes and pages."""
