# calmon: the HTTP API under gunicorn. The same image runs the one-shot `calmon migrate` and the
# separate `calmon refresh --loop` worker (see docker-compose.yml and deploy/kubernetes/).
#
#   docker build -t calmon:0.1.0 .
#   docker run --rm -e CALMON_DATABASE_URL=postgresql://... calmon:0.1.0 calmon migrate
#   docker run -p 127.0.0.1:8000:8000 -e CALMON_DATABASE_URL=... -e CALMON_ADMIN_TOKEN=... calmon:0.1.0
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed numeric uid, so that Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 calmon \
    && useradd --system --uid 10001 --gid calmon --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin calmon

WORKDIR /app

# The package's metadata and source, then install it: the migrations are installed inside the
# package (service.migrations), where `calmon migrate` and /readyz find them. The server and
# postgresql extras hold the service's dependencies (the bare package is the client); numpy,
# scipy, psycopg[binary] and orjson come as manylinux wheels: no compiler is needed.
COPY pyproject.toml README.md ./
COPY service ./service
COPY migrations ./migrations
RUN pip install ".[server,postgresql]" && rm -rf build calmon.egg-info service migrations

# deploy/gunicorn.conf.py is for running gunicorn directly:
#   gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'
COPY deploy/gunicorn.conf.py ./deploy/gunicorn.conf.py

# ./instance holds the SQLite default database (CALMON_DATABASE_URL unset): writable by calmon.
RUN mkdir -p /app/instance && chown calmon:calmon /app/instance

ENV CALMON_BIND=0.0.0.0:8000

USER 10001:10001

EXPOSE 8000

# Liveness only (the process answers); /readyz, which also needs the database at the schema's
# head, is for orchestrators that route traffic (Kubernetes' readiness probe).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

CMD ["calmon", "serve", "--host", "0.0.0.0", "--port", "8000"]
