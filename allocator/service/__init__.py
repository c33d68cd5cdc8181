"""The service shell: configuration, the CLI, the Flask app, the extender wire format, the page
and the metrics."""
