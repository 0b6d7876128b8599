# threadpilot: the Slack app, one worker per container (docs/operations.md, Containers).
# Settings come from the environment at run time; nothing secret is baked into the image.
# An exact version tag, not a digest: no registry could be asked for the digest when this
# was written. Pin it by digest where you build (docker buildx imagetools inspect).
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package and its dependencies, from this repository (no dev extras), at exactly the
# versions the tests passed with: constraints.txt, through PIP_CONSTRAINT so that the
# isolated build environment (the build backend) is pinned too.
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY agent_core ./agent_core
COPY bot ./bot
RUN PIP_CONSTRAINT=/src/constraints.txt pip install . && rm -rf /src

# An unprivileged user; /data is its working directory, so the default DATABASE_URL
# (sqlite:///./threadpilot.db, and its -wal and -shm files) lands there, in a volume that
# outlives the container: mount one there (docker run -v threadpilot-data:/data ...).
RUN useradd --system --uid 10001 --create-home --home-dir /home/threadpilot threadpilot \
    && mkdir /data && chown threadpilot:threadpilot /data
VOLUME /data
USER threadpilot
WORKDIR /data

EXPOSE 3000
STOPSIGNAL SIGTERM
# GET /healthz on PORT answers 200 while the process is up (no curl in a slim image).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % (os.environ.get('PORT') or '3000'), timeout=4)"]

CMD ["python", "-m", "bot"]
