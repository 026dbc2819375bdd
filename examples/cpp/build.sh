#!/usr/bin/env bash
# Build examples/cpp/decode.cpp against the headers and shared libraries the executorch wheel ships
# (no CMake). Usage: examples/cpp/build.sh [output binary]   (default: examples/cpp/decode)
# Uses the python on PATH (activate the project venv first) to find the wheel.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/decode}"
ET="$(python -c 'import executorch; print(list(executorch.__path__)[0])')"
# Kernel and backend libraries register themselves from static initialisers: keep them linked
# (--no-as-needed) although no symbol of theirs is referenced.
exec "${CXX:-g++}" -std=c++17 -O2 \
  -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED -DET_USE_THREADPOOL \
  -I"$ET/include" -I"$ET/include/executorch/runtime/core/portable_type/c10" \
  "$here/decode.cpp" -o "$out" -L"$ET/lib" \
  -Wl,--no-as-needed -lexecutorch_kernels_optimized -lexecutorch_backend_xnnpack -lexecutorch_threadpool \
  -Wl,--as-needed -lexecutorch -Wl,-rpath,"$ET/lib"
