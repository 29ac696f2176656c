"""gunicorn configuration for calmon, for running gunicorn directly instead of ``calmon serve``:

    gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'

The settings are the ones ``calmon serve`` uses (``service.server.gunicorn_settings``: gthread
workers whose own error replies, such as 414 for a request line too long and 431 for header
fields too large, are calmon's JSON envelope; 30 s graceful shutdown on SIGTERM; the Prometheus
multiprocess directory wiped and prepared in ``on_starting``; each worker's start-up heap frozen
out of the garbage collector's full passes in ``post_worker_init``; dead workers marked in
``child_exit``), read from the environment:

    CALMON_BIND               host:port to listen on (default 127.0.0.1:8000; the image sets
                              0.0.0.0:8000)
    WEB_CONCURRENCY           worker processes (default 2)
    CALMON_THREADS            threads per worker (default 4; 1 selects sync workers)
    PROMETHEUS_MULTIPROC_DIR  the workers' metric files (default: a fresh temporary directory)

Command-line options given to gunicorn after ``-c`` still override these.

The port expects a buffering reverse proxy in front of it (deploy/nginx/calmon.conf, or the
ingress-nginx settings in deploy/README.md): a worker thread reads a request itself from its
first byte on, so clients that trickle their headers or bodies hold every thread and /healthz
stops answering. Bind it to a public interface only behind such a proxy.
"""

from service.server import gunicorn_settings_from_env

# gunicorn reads this file's module-level names that match its settings (bind, workers,
# worker_class, threads, graceful_timeout, timeout, accesslog, on_starting, post_worker_init,
# child_exit).
globals().update(gunicorn_settings_from_env())
