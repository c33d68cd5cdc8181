"""The webhook's server: gunicorn's asyncio worker on uvloop, with a bridge that hands the
Flask app complete requests only (:mod:`.bridge`), a worker that stops promptly and bounds a
new connection's first request (:mod:`.worker`), renewed certificate files served to new
connections (:mod:`.handshakes`), all started by :func:`.server.serve`. Its reliance on
gunicorn's private internals: :mod:`.internals`. Nothing here imports the granian side.
"""
