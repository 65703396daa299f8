# Azurite, the Azure Storage emulator, for deploy/compose.yaml: the version package-lock.json pins (the test suite's),
# installed here from its npm package rather than pulled as an image from a registry.
#
#   docker build -f deploy/azurite.Dockerfile -t queueworker-azurite:3.37.0 .   (the context is the repository root)
#
# The base image is deploy/Dockerfile's (the same PYTHON_IMAGE argument, Debian 12), so that the compose file's two
# images need one base and nothing else from a registry. Debian's nodejs runs Azurite; Debian's npm runs `npm ci` on
# package-lock.json (exactly the locked packages, their integrity checked) and is removed in the same step, so that
# the image holds no npm. Azurite is package.json's one devDependency, so `npm ci` installs dev dependencies
# (`--omit=dev` would install nothing). Azurite 3.37 declares Node >= 22; Debian 12's Node 18 runs its queue service,
# which is what compose.yaml runs (the container tests run it there).
#
# One stage: a second stage's `COPY --from` of node_modules (some 250 MB in thousands of files) made podman hash it
# all again on every build, 30 s when nothing had changed.
#
# Plain Dockerfile syntax (no "# syntax=" line), so that Docker and podman build it without fetching a frontend
# image from a registry.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE}

# Debian's Node.js. Not pinned to one build: Debian's security updates replace it on the mirrors. apt-get clean drops
# the downloaded packages, which python's slim images drop by their apt settings and a plainer Debian base keeps.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/azurite
COPY package.json package-lock.json ./
# Debian's npm (likewise not pinned) for `npm ci` alone, then purged with the packages it brought.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends npm \
    && npm ci --no-audit --no-fund --loglevel=error \
    && npm cache clean --force \
    && apt-get purge -y --auto-remove npm \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /root/.npm \
    && node_modules/.bin/azurite-queue --version

ARG PYTHON_IMAGE
# The version is package-lock.json's Azurite (tests/deploy checks that they agree).
LABEL org.opencontainers.image.title="queueworker-azurite" \
      org.opencontainers.image.description="Azurite, the Azure Storage emulator, as queueworker's package-lock.json pins it" \
      org.opencontainers.image.version="3.37.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# A numeric uid, as the worker's image has; /data holds Azurite's files (compose.yaml's named volume).
RUN groupadd --system --gid 10001 azurite \
    && useradd --system --uid 10001 --gid azurite --home-dir /opt/azurite --no-create-home \
       --shell /usr/sbin/nologin azurite \
    && mkdir -p /data \
    && chown azurite:azurite /data

ENV PATH=/opt/azurite/node_modules/.bin:$PATH
VOLUME ["/data"]
EXPOSE 10000 10001 10002
USER 10001:10001
WORKDIR /data

# Every service on every interface of the container, its data in /data; compose.yaml runs the queue service alone.
# --disableTelemetry: a local emulator has no reason to report its requests to an endpoint on the internet.
CMD ["azurite", "--blobHost", "0.0.0.0", "--queueHost", "0.0.0.0", "--tableHost", "0.0.0.0", "--location", "/data", \
     "--loose", "--skipApiVersionCheck", "--disableTelemetry"]
