# threadpilot: the Slack app, one worker per container (docs/operations.md, Containers).
# Settings come from the environment at run time; nothing secret is baked into the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package and its dependencies, from this repository (no dev extras).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent_core ./agent_core
COPY bot ./bot
RUN pip install . && rm -rf /src

# An unprivileged user; /data is its working directory (the default SQLite file lands there).
RUN useradd --system --uid 10001 --create-home --home-dir /home/threadpilot threadpilot \
    && mkdir /data && chown threadpilot:threadpilot /data
USER threadpilot
WORKDIR /data

EXPOSE 3000
STOPSIGNAL SIGTERM
# GET /healthz on PORT answers 200 while the process is up (no curl in a slim image).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % (os.environ.get('PORT') or '3000'), timeout=4)"]

CMD ["python", "-m", "bot"]
