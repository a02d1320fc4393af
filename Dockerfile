# capscope: the web app and API on port 7860.
#   docker build -t capscope .                                  # weights fetched at first use
#   docker build -t capscope --build-arg DOWNLOAD_WEIGHTS=1 .   # every public weight baked in (offline image)
#   docker run -p 7860:7860 -v capscope-data:/data capscope     # runs as the user capscope (uid 10001)
# DOWNLOAD_WEIGHTS=1 runs `capscope models download` with no names: CLIP ViT-B-32 (openai), spaCy's
# en_core_web_sm and the released InfoMetIC and PAC-S checkpoints (into CAPSCOPE_CACHE, /models). Those
# two carry no stated licence (docs/licences.md): keep such an image for yourself. SAM is downloaded at
# first use; the ultralytics region sources (AGPL-3.0) are not installed: add the `yolo` extra to use them.
FROM python:3.11-slim

# A CPU-only torch keeps the image small; leave empty to take PyPI's default (CUDA) build.
ARG TORCH_INDEX_URL=""
ARG DOWNLOAD_WEIGHTS=0

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    CAPSCOPE_DATA_DIR=/data \
    CAPSCOPE_CACHE=/models \
    HF_HOME=/models/hf

# Java: pycocoevalcap's tokenizer, METEOR and SPICE (capscope diagnose's n-gram scores)
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 default-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/capscope
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install torch torchvision --index-url "$TORCH_INDEX_URL"; fi
COPY pyproject.toml README.md ./
COPY app app
COPY metrics metrics
COPY annotation annotation
COPY db db
COPY static static
RUN pip install ".[captioning]"

# CLIP (open_clip openai tag), spaCy's en_core_web_sm, the released InfoMetIC and PAC-S checkpoints
RUN if [ "$DOWNLOAD_WEIGHTS" = "1" ]; then capscope models download; fi

# The server runs as a user of its own, who owns only the data and the weights (fetched at first use)
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home capscope \
    && mkdir -p /data /models && chown -R capscope:capscope /data /models && chmod 0700 /data
USER capscope

VOLUME ["/data"]
EXPOSE 7860
# Plain HTTP: put a TLS reverse proxy in front for a team (docs/ui.md, "Running for a team")
CMD ["capscope", "serve", "--host", "0.0.0.0", "--port", "7860"]
