"""The allocator's server: granian (Rust HTTP/1.1, HTTP/2 and rustls) behind its WSGI
interface, with complete bodies within the deadline (:mod:`.bodies`), renewed certificate
files served by a new worker (:mod:`.server`), all started by :func:`.server.serve`. Its
reliance on granian's private internals: :mod:`.internals`. Nothing here imports the
gunicorn side.
"""
