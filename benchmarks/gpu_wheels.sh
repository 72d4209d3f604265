#!/usr/bin/env bash
# The wheels a GPU machine without network needs, for Python 3.12 on x86-64, in two carried folders:
#   .whl/   liger-kernel, fla-core (the kernel libraries the fills measure)
#   .whl3/  nvidia-cudnn-frontend (the cudnn family; its CuTe DSL dependency is for other kernels, left out)
#   .whl4a/ .whl4b/  quack-kernels, flash-attn-4 (FlashAttention 4, in .whl4b) and CUTLASS's CuTe DSL:
#           nvidia-cutlass-dsl-libs-cu13 (a 92 MB wheel, 227 MB unpacked) is unpacked, xz-compressed (64 MB)
#           and split in two parts, one folder per call (the machine keeps /tmp between warm calls);
#           benchmarks/gpu_install.sh installs what has arrived and unpacks the libraries once both parts are
#           there. .whl3 and .whl4a fit one call beside the tree, .whl4b the next
#   .whl2/  dagster and what it needs beyond the GPU image's packages, and deltalake unpacked and
#           xz-compressed (its 52 MB wheel would not fit one call's 64 MiB beside the tree)
# .whl2 (50 MB) fits one call beside the tree and .whl, not beside .whl3 too: carry what the call needs.
# Usage: benchmarks/gpu_wheels.sh; then in each call on the machine, with what it needs carried:
#   bash benchmarks/gpu_install.sh && . benchmarks/gpu_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.whl2/\n/.whl3/\n' >> .git/info/exclude
grep -qx '/.whl3/' .git/info/exclude || printf '/.whl3/\n' >> .git/info/exclude
grep -qx '/.whl4a/' .git/info/exclude || printf '/.whl4a/\n/.whl4b/\n' >> .git/info/exclude
get() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$@"
}
mkdir -p .whl .whl2 .whl3
get .whl 'liger-kernel>=0.8,<0.9' 'fla-core>=0.6,<0.7'
get .whl3 'nvidia-cudnn-frontend>=1.32,<2'
# dagster's closure less what the GPU image has (click, jinja2, requests, rich, pyyaml, grpcio's peers...)
# (pinned as resolved together on 2026-12-04: pydantic and pydantic-core, grpcio and its health checking, must match)
get .whl2 alembic==1.20.1 annotated-types==0.8.0 antlr4-python3-runtime==4.13.2 arro3-core==0.9.1 coloredlogs==14.0 \
  dagster-pipes==1.13.28 dagster-shared==1.13.28 dagster==1.13.28 deprecated==3.0.1 docstring-parser==0.18.0 \
  grpcio-health-checking==1.85.1 grpcio==1.85.3 humanfriendly==10.0 mako==1.4.3 pathlib-abc==0.5.2 \
  platformdirs==4.14.9 protobuf==7.36.2 pydantic-core==2.50.5 pydantic==2.14.4 python-dotenv==1.2.4 pytz==2026.6 \
  sqlalchemy==2.1.9 structlog==26.1.0 tomli==2.5.0 tomlkit==0.15.3 toposort==1.10 typing-inspection==0.4.5 \
  tzdata==2026.6 universal-pathlib==0.3.10 watchdog==6.0.0
if [ ! -f .whl2/deltalake.tar.xz ]; then
  tmp=$(mktemp -d)
  get "$tmp" 'deltalake>=1.6,<2'
  (cd "$tmp" && mkdir x && cd x && unzip -q ../deltalake-*.whl && tar -cf - . | xz -T0 -9 > ../deltalake.tar.xz)
  mv "$tmp/deltalake.tar.xz" .whl2/
  rm -rf "$tmp"
fi
# quack's closure less what the GPU image has (cuda-bindings, protobuf, einops, typing-extensions); the
# CuTe DSL's CUDA 13 libraries match the image's torch (cu130)
if [ ! -f .whl4b/cutlass-cu13.tar.xz.part-ab ]; then
  mkdir -p .whl4a .whl4b
  get .whl4a 'quack-kernels>=0.6,<0.7' nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
    nvidia-cutlass-dsl-libs-core==4.8.1 'apache-tvm-ffi>=0.1.6,<0.2' torch-c-dlpack-ext
  tmp=$(mktemp -d)
  get "$tmp" nvidia-cutlass-dsl-libs-cu13==4.8.1
  (cd "$tmp" && mkdir x && cd x && unzip -q ../nvidia_cutlass_dsl_libs_cu13-*.whl && tar -cf - . | xz -T0 -9e > ../cu13.tar.xz)
  (cd "$tmp" && split -n 2 -d -a 1 cu13.tar.xz part-)
  mv "$tmp/part-0" .whl4a/cutlass-cu13.tar.xz.part-aa
  mv "$tmp/part-1" .whl4b/cutlass-cu13.tar.xz.part-ab
  rm -rf "$tmp"
fi
# FlashAttention 4 on the same CuTe DSL and tvm-ffi (its other dependencies are quack's and the image's)
get .whl4b 'flash-attn-4>=4.0.0b36,<4.1'
du -sh .whl .whl2 .whl3 .whl4a .whl4b
