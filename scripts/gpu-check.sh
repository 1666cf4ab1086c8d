#!/usr/bin/env bash
# Measure Tandem on an NVIDIA GPU with one command, the figures of the GPU sittings in docs/results/ (summed up in
# docs/gpu-and-rpc.md, "What to expect on a GPU"):
#
#   scripts/gpu-check.sh [OUT_DIR]          (default OUT_DIR: gpu-results/<date-time>)
#
# 1. builds llama-cpp-python with CUDA into its own virtual environment (.venv-cuda; the CPU .venv is left alone)
#    and checks that the build can offload;
# 2. runs the test suite with every model fully on the GPU (TANDEM_TEST_GPU_LAYERS=-1);
# 3. benchmarks the demo pair: `bench --k auto` and `--k 8` on the built-in suite, and both on the prompt of the
#    llama.cpp reference; the three drafters on the edit prompts; what a verify pass costs (scripts/verify_cost.py,
#    CUDA graphs off and on); `models fit --place` (the fit estimate against what llama.cpp placed);
# 4. compiles llama.cpp's own llama-speculative-simple and llama-bench from the same vendored source (the
#    llama-cpp-python sdist) against the CUDA build's libraries (seconds; a cmake build of its own if that fails)
#    and runs them on the same models and prompt as the reference;
# 5. writes OUT_DIR/summary.md (scripts/gpu_summary.py) beside every JSON file and log.
#
# Needs: an NVIDIA GPU with its driver (nvidia-smi), the CUDA toolkit (nvcc), a C++ compiler (cmake only where the
# reference tools do not compile against the build), and the network for the first build and the demo models (or a warm pip cache and data dir).
# Environment:
#   CMAKE_CUDA_ARCHITECTURES / CUDAARCHS   CUDA architecture(s) to build for (default: the GPU's own, from
#                                          nvidia-smi; e.g. 90 for an H100); CMAKE_ARGS is honoured too
#   LLAMA_SDIST       llama_cpp_python-0.3.36.tar.gz (or its unpacked folder); default: pip download
#   TANDEM_VENV       the CUDA virtual environment (default .venv-cuda)
#   PAIR              the pair to benchmark (default demo-smollm2); REPEATS (default 3); TOKENS (default 256)
#   TESTS             the tests to run, as pytest arguments (default: the whole suite), e.g. "tests/engine -x"
set -euo pipefail
shopt -s nullglob

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/gpu-results/$(date +%Y%m%d-%H%M%S)}"
PAIR="${PAIR:-demo-smollm2}"
REPEATS="${REPEATS:-3}"
TOKENS="${TOKENS:-256}"
LLAMA_VERSION="0.3.36"

say() { echo "[gpu-check] $*"; }
die() { echo "[gpu-check] error: $*" >&2; exit 1; }

# --- 1. a GPU, the toolkit, a CUDA build -------------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 ||
    die "no NVIDIA GPU here (nvidia-smi not found). This script measures Tandem on an NVIDIA GPU with CUDA; on a machine without one use 'python launcher.py bench'."
nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    die "nvidia-smi lists no GPU (no device visible, or the driver is not loaded): nothing to measure on."
if ! command -v nvcc >/dev/null 2>&1; then
    [ -x /usr/local/cuda/bin/nvcc ] || die "the CUDA toolkit (nvcc) is not installed: it is needed to build llama.cpp with CUDA."
    export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v python3 >/dev/null 2>&1 || die "python3 (3.10 or newer) is needed"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
say "results go to $OUT"
ARCH="${CMAKE_CUDA_ARCHITECTURES:-${CUDAARCHS:-}}"
if [ -z "$ARCH" ]; then  # the GPU's own architecture only: a much shorter build than llama.cpp's default list
    ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)"
fi
CUDA_FLAGS="-DGGML_CUDA=on"
case "${CMAKE_ARGS:-}" in
    *CMAKE_CUDA_ARCHITECTURES*) ;;  # given in CMAKE_ARGS: keep it
    *) [ -n "$ARCH" ] && CUDA_FLAGS="$CUDA_FLAGS -DCMAKE_CUDA_ARCHITECTURES=$ARCH" ;;
esac
export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }$CUDA_FLAGS"
export TANDEM_BACKEND=cuda
export TANDEM_VENV="${TANDEM_VENV:-$ROOT/.venv-cuda}"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
    nvcc --version | tail -n1
    echo "CXX=${CXX:-} CC=${CC:-} CUDAHOSTCXX=${CUDAHOSTCXX:-} g++: $(command -v g++ || echo none)"
    echo "CMAKE_ARGS=$CMAKE_ARGS"
    echo "tandem $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), llama-cpp-python $LLAMA_VERSION"
} > "$OUT/device.txt"
say "device: $(head -n1 "$OUT/device.txt")"

# The vendored llama.cpp source, for the reference tools (and as the pip source of the CUDA build).
SDIST="${LLAMA_SDIST:-}"
if [ -z "$SDIST" ]; then
    mkdir -p "$OUT/src"
    if python3 -m pip download --quiet --no-deps --no-binary :all: -d "$OUT/src" "llama-cpp-python==$LLAMA_VERSION" \
            > "$OUT/src/pip-download.log" 2>&1; then
        found=("$OUT"/src/llama_cpp_python-*.tar.gz)
        SDIST="${found[0]:-}"
    else
        say "could not download the llama-cpp-python sdist (see src/pip-download.log): no llama.cpp reference"
    fi
fi
SRC=""
if [ -n "$SDIST" ] && [ -f "$SDIST" ]; then
    SDIST_DIR="$(cd "$(dirname "$SDIST")" && pwd)"
    export PIP_FIND_LINKS="$SDIST_DIR${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
    mkdir -p "$OUT/src"
    tar -xzf "$SDIST" -C "$OUT/src"
    found=("$OUT"/src/llama_cpp_python-*/vendor/llama.cpp)
    SRC="${found[0]:-}"
elif [ -n "$SDIST" ] && [ -d "$SDIST/vendor/llama.cpp" ]; then
    SRC="$SDIST/vendor/llama.cpp"
fi

cd "$ROOT"
say "building llama-cpp-python with CUDA into $TANDEM_VENV (CMAKE_ARGS=$CMAKE_ARGS; the first build takes a while)"
python3 launcher.py setup --pair "$PAIR" 2>&1 | tee "$OUT/setup.log"
PY="$TANDEM_VENV/bin/python"
"$PY" -c 'import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)' ||
    die "the llama-cpp-python in $TANDEM_VENV cannot offload (the CUDA build failed and the launcher fell back to the CPU build; see $OUT/setup.log). Fix the toolkit, delete $TANDEM_VENV and run this again."

# A build can load models by itself and still crash once another C++ extension (numpy, matplotlib) was imported
# first: on a lent H100 a build of this script's flags died in llama_model_load_from_file (the tokenizer's
# std::regex, inside llama_vocab::load), which Tandem, its tests and its benchmarks all reach after numpy. A
# vocabulary-only load after numpy, in a process of its own, shows it in seconds.
mapfile -t MODELS < <("$PY" -c 'import sys; sys.path.insert(0, "."); from app.models.provision import ensure_pair
_, t, d = ensure_pair(sys.argv[1]); print(t); print(d)' "$PAIR" | tail -n 2)
[ "${#MODELS[@]}" -eq 2 ] || die "could not find or fetch $PAIR's models (see $OUT/setup.log)"
TARGET="${MODELS[0]}"; DRAFT="${MODELS[1]}"
say "checking that a model loads once numpy is imported (a crash there takes every later step with it)"
if ! "$PY" -c 'import sys, numpy
import llama_cpp as L
p = L.llama_model_default_params(); p.vocab_only = True
sys.exit(0 if L.llama_model_load_from_file(sys.argv[1].encode(), p) else 1)' "$DRAFT" > "$OUT/load-check.log" 2>&1; then
    die "loading $PAIR's draft model crashed or failed once numpy was imported first (see $OUT/load-check.log): this llama-cpp-python build in $TANDEM_VENV cannot run Tandem. Seen once, on a lent H100 with numpy 2.5.2 (a segmentation fault in the tokenizer's std::regex) where CXX, CC and CUDAHOSTCXX named a GCC under /opt/gcc rather than the system's; see the compilers in $OUT/device.txt. Delete $TANDEM_VENV and build again with the system compiler (CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++)."
fi

# --- 2. the test suite with every layer on the GPU ---------------------------------------------------------
say "test suite with GPU offload (TANDEM_TEST_GPU_LAYERS=-1)"
set +e
# shellcheck disable=SC2086  # TESTS is a list of pytest arguments
TANDEM_TEST_GPU_LAYERS=-1 python3 launcher.py test -- -q -rfE ${TESTS:-} 2>&1 | tee "$OUT/tests.log"
TESTS_RC=${PIPESTATUS[0]}
set -e

# --- 3. Tandem's benchmarks ---------------------------------------------------------------------------------
PROMPT=$'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
"$PY" -c 'import json, sys; print(json.dumps({"id": "fib", "prompt": sys.argv[1]}))' "$PROMPT" > "$OUT/fib.jsonl"
bench() {  # NAME ARGS...: one bench run, its JSON and its log
    local name="$1"; shift
    say "bench $name: $*"
    python3 launcher.py bench --pair "$PAIR" --max-tokens "$TOKENS" --repeats "$REPEATS" --json "$OUT/$name.json" "$@" \
        2>&1 | tee "$OUT/$name.log"
}
bench bench-auto --k auto
bench bench-k8 --k 8 --reference bare-spec
bench bench-fib-auto --k auto --prompts-file "$OUT/fib.jsonl"
bench bench-fib-k8 --k 8 --prompts-file "$OUT/fib.jsonl"
bench bench-edit-drafters --suite edit --max-tokens 192 --proposer auto,draft,lookup
say "verify cost (scripts/verify_cost.py), CUDA graphs off (Tandem's default) and on"
"$PY" scripts/verify_cost.py "$PAIR" > "$OUT/verify-cost.txt" 2>&1 || true
env -u GGML_CUDA_DISABLE_GRAPHS TANDEM_CUDA_GRAPHS=1 "$PY" scripts/verify_cost.py "$PAIR" > "$OUT/verify-cost-graphs.txt" 2>&1 || true
say "models fit --place $PAIR"
python3 launcher.py models fit --place "$PAIR" --json > "$OUT/fit-place.json"

# --- 4. llama.cpp's own tools from the same source, as the reference ---------------------------------------
if [ -z "$SRC" ]; then
    say "no llama.cpp source (set LLAMA_SDIST to llama_cpp_python-$LLAMA_VERSION.tar.gz): reference skipped"
else
    # The two tools need no CUDA code of their own: compiled against the CUDA build's libraries that the wheel
    # installed (its lib/ folder holds llama-common too) they take seconds, where a second CUDA build of
    # llama.cpp takes as long as the first. A full cmake build is the fallback.
    BIN="$OUT/llama.cpp-tools"
    LIBS="$("$PY" -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent.parent / "lib")')"
    say "compiling llama-bench and llama-speculative-simple from $SRC against $LIBS"
    mkdir -p "$BIN"
    INC=(-I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/common" -I"$SRC/vendor" -I"$SRC/tools/llama-bench")
    LINK=(-L"$LIBS" -lllama-common -lllama -lggml -lggml-base -lpthread -Wl,--disable-new-dtags,-rpath,"$LIBS")
    if ! { c++ -O3 -DNDEBUG -std=c++17 "${INC[@]}" "$SRC/tools/llama-bench/main.cpp" \
               "$SRC/tools/llama-bench/llama-bench.cpp" "${LINK[@]}" -o "$BIN/llama-bench" &&
           c++ -O3 -DNDEBUG -std=c++17 "${INC[@]}" "$SRC/examples/speculative-simple/speculative-simple.cpp" \
               "${LINK[@]}" -o "$BIN/llama-speculative-simple"; } > "$OUT/tools-build.log" 2>&1; then
        BUILD="$OUT/llama.cpp-build"
        BIN="$BUILD/bin"
        if command -v cmake >/dev/null 2>&1; then
            say "that failed (see tools-build.log): building them with cmake from $SRC"
            cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON ${ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$ARCH} \
                -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$OUT/cmake.log" 2>&1
            cmake --build "$BUILD" -j"$(nproc)" --target llama-speculative-simple llama-bench >> "$OUT/cmake.log" 2>&1
        else
            say "the reference tools did not compile (see tools-build.log) and cmake is not installed: reference skipped"
        fi
    fi
fi
if [ -n "$SRC" ] && [ -x "$BIN/llama-bench" ]; then
    for which in target draft; do
        model="$TARGET"; [ "$which" = draft ] && model="$DRAFT"
        say "llama-bench tg128, $which $(basename "$model")"
        "$BIN/llama-bench" -m "$model" -ngl 99 -p 0 -n 128 -o json > "$OUT/llama-bench-$which.json" \
            2> "$OUT/llama-bench-$which.log"
    done
    for n in 2 4 8; do
        say "llama-speculative-simple --spec-draft-n-max $n"
        "$BIN/llama-speculative-simple" -m "$TARGET" -md "$DRAFT" --spec-type draft-simple \
            --spec-draft-n-max "$n" -ngl 99 -ngld 99 -p "$PROMPT" -n "$TOKENS" --temp 0 --top-k 1 --seed 42 \
            > "$OUT/llama-spec-n$n.log" 2>&1
    done
fi

# --- 5. the table -------------------------------------------------------------------------------------------
"$PY" "$ROOT/scripts/gpu_summary.py" "$OUT" | tee "$OUT/summary.md"
if [ "$TESTS_RC" -ne 0 ]; then
    die "the test suite failed with GPU offload (exit $TESTS_RC; see $OUT/tests.log); the benchmarks above ran anyway"
fi
say "done: $OUT/summary.md"
